"""The gang-permit cache: plans, the bind barrier and backoff. Pure bookkeeping; the clock is passed in."""
