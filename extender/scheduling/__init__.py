"""The decisions behind each verb: synchronous, over the cluster store; no HTTP, no JSON.

`scheduler.Scheduler` is the facade the server talks to: the verbs (filter, prioritize, bind,
preempt), the outcomes it reports back (bind_done, release_done) and one `tick` for everything that
happens with time. It builds the parts below and holds nothing else of its own but the store
listener that fans a change out to them. Each part owns one concern and its state:

- filtering: the filter verb (plain pods, gang plans, planned members moved or dropped);
- binding: the bind verb, the barrier's releases, the start-up fence, what a release or an expiry says;
- gang_preemption: a gang as preemptor (by priority, in its queue) and reclaim between queues;
- admission: KAI queue admission, the queue holds, Queue status, the QueueBook of usage;
- telling: what pods and group objects are told (conditions, status, events) and the nudges;
- holding: the pass that chooses which waiting gangs hold capacity, and the nudge of a ready holder;
- pooling: the size-class pools' reads of the cluster (each pool domain's class), cached;
- view: shared reads over the store and the ledger (FilterCall, gang_of_pod, the Evictions);
- debug: what /debug shows (reads only);
- below them, pure computation and the records: planning, preemptor, preemption, queues, topology,
  disruption, podgrouper, status, messages, decisions, reasons, settling; and the ledger, the one
  owner of plans, holds (holds.HoldBook), arrivals, releases and preemptions in flight.

Where a new feature goes: a new verb's decision is a module of its own beside filtering and binding,
called from the facade; a new rule applied at filter or bind time is a function in the module of the
concern it refines (a queue rule in admission or queues, a placement rule in planning); anything
that happens with time is a step of `Scheduler.tick`, placed where the order it needs says (its
docstring lists that order); state that must survive a plan or a release belongs in the ledger,
never in a copy. The import-linter contract in pyproject.toml orders these modules: a module may
import only those below it.
"""
