"""gang-extender: a kube-scheduler extender for gang and topology-aware scheduling."""

__version__ = "0.1.0"
