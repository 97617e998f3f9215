"""Label and annotation keys this project reads or writes, in one place.

KAI's contract is asymmetric on purpose-by-history: group membership is an annotation,
subgroup membership and queue are labels (KAI issue #918). We keep KAI's exact keys so
KAI-annotated workloads work unchanged.
"""

# Kubernetes: what the API server writes in a pod's spec.schedulerName when the pod names none
DEFAULT_SCHEDULER_NAME = "default-scheduler"

# KAI Scheduler contract
POD_GROUP_NAME = "pod-group-name"  # annotation on the pod
SUBGROUP_NAME = "kai.scheduler/subgroup-name"  # label on the pod
QUEUE = "kai.scheduler/queue"  # label on top owner or pod
SKIP_PODGROUPER = "kai.scheduler/skip-podgrouper"  # annotation, exactly "true"
BATCH_MIN_MEMBER = "kai.scheduler/batch-min-member"  # annotation on Job / JobSet / RJ template
TOPOLOGY = "kai.scheduler/topology"
TOPOLOGY_REQUIRED = "kai.scheduler/topology-required-placement"
TOPOLOGY_PREFERRED = "kai.scheduler/topology-preferred-placement"
SEGMENT_SIZE = "kai.scheduler/segment-size"  # PyTorchJob Worker template: split workers into segments
SEGMENT_REQUIRED = "kai.scheduler/segment-topology-required-placement"
SEGMENT_PREFERRED = "kai.scheduler/segment-topology-preferred-placement"
PRIORITY_CLASS_LABEL = "priorityClassName"

# JobSet controller (labels and annotations on child Jobs and their pods)
JOBSET_NAME = "jobset.sigs.k8s.io/jobset-name"
JOBSET_UID = "jobset.sigs.k8s.io/jobset-uid"
REPLICATED_JOB_NAME = "jobset.sigs.k8s.io/replicatedjob-name"
REPLICATED_JOB_REPLICAS = "jobset.sigs.k8s.io/replicatedjob-replicas"
GLOBAL_REPLICAS = "jobset.sigs.k8s.io/global-replicas"
JOB_INDEX = "jobset.sigs.k8s.io/job-index"
JOB_GLOBAL_INDEX = "jobset.sigs.k8s.io/job-global-index"
JOB_KEY = "jobset.sigs.k8s.io/job-key"
RESTART_ATTEMPT = "jobset.sigs.k8s.io/restart-attempt"

# Workload API (Kubernetes 1.37): a parent controller delegates a child Job's PodGroup to the Job
# controller by naming the template of its own Workload; the composite parent's annotation is spelled
# without the hyphen in 1.37's code (pkg/apis/scheduling) and with it in the KEP text: both are read.
GROUP_TEMPLATE_NAME = "scheduling.k8s.io/group-template-name"
PARENT_COMPOSITE_PODGROUP = (
    "scheduling.k8s.io/parent-compositepodgroup",
    "scheduling.k8s.io/parent-composite-podgroup",
)

# batch Job controller
JOB_NAME = "batch.kubernetes.io/job-name"
JOB_NAME_LEGACY = "job-name"
JOB_COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
CONTROLLER_UID = "batch.kubernetes.io/controller-uid"

# Kubeflow training operator
PYTORCH_REPLICA_TYPE = "training.kubeflow.org/replica-type"
PYTORCH_REPLICA_INDEX = "training.kubeflow.org/replica-index"
PYTORCH_JOB_NAME = "training.kubeflow.org/job-name"

# ours
NUDGE = "gang-extender.io/nudge"  # annotation patched on pending siblings so kube-scheduler retries them
MANAGED_BY = "app.kubernetes.io/managed-by"  # label on the KAI PodGroups this service creates and keeps
MANAGER = "gang-extender"  # its value: a PodGroup without it is someone else's and never touched
