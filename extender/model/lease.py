"""The leader-election Lease an operator names on the command line (`--leader-lease NAMESPACE/NAME`):
parsed in this one place, for the settings' validation, the service's leadership and the CLI's watch."""

from __future__ import annotations


def split_lease_ref(value: str) -> tuple[str, str]:
    """(namespace, name) of `NAMESPACE/NAME`; ValueError saying what an operator should give otherwise."""
    namespace, sep, name = value.partition("/")
    if not (sep and namespace and name) or "/" in name:
        raise ValueError(
            f"--leader-lease wants NAMESPACE/NAME of kube-scheduler's leader-election Lease (e.g. "
            f"kube-system/gang-scheduler), got {value!r}"
        )
    return namespace, name
