"""Pure values shared by every layer: keys, label names, quantities and the gang tree. No I/O."""
