"""The decisions behind each verb: synchronous, over the cluster store; no HTTP, no JSON."""
