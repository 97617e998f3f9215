"""The cluster cache: objects fed by a source (embedded file or live API), node arrays, pod accounting."""
