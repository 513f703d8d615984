# Included first by the Snakefile: the config's validation (a bad config stops here, before any job),
# then the one plan that the other .smk files read (fedbench.planning.workflow.WorkflowPlan -- files, settings,
# resources, the claims' looks).  No rules here, and no logic of the plan's own.

import sys
from pathlib import Path

from snakemake.exceptions import WorkflowError
from snakemake.utils import validate

from fedbench.config.files import ConfigFileError, normalise_config
from fedbench.planning.missing_data import leave_out_missing
from fedbench.planning.preflight import Workplace
from fedbench.planning.validate import validate_config
from fedbench.planning.workflow import WorkflowPlan


def train_gpus():
    """GPUs a training job requests (``--set-resources train_cell:gpu=1``, the SLURM profile's ``gpu: 1``)."""
    train_resources = workflow.resource_settings.overwrite_resources.get("train_cell", {})
    try:
        return int(train_resources.get("gpu", 0) or 0)
    except (TypeError, ValueError):
        return 0


def command_targets():
    """The targets the ``snakemake`` command line names (empty: the default target; None: not started by the
    command).  Snakemake sets its DAG settings only after reading this file, so its own parser reads them here."""
    if Path(sys.argv[0]).name != "snakemake":
        return None
    from snakemake.cli import get_argument_parser
    try:
        return set(get_argument_parser().parse_known_args(sys.argv[1:])[0].targets)
    except SystemExit:  # a command line Snakemake itself will refuse, with its own message
        return None


def workplace():
    """Where this plan runs (fedbench.planning.preflight); ``None`` inside a job, which the plan already checked."""
    if not workflow.is_main_process:
        return None
    return Workplace(Path(workflow.basedir), Path.cwd(), train_gpus(), command_targets() == {"claims"})


# ---- validation ---------------------------------------------------------------------
# A bad config stops here, before any job, with one line naming the entry, the problem and the
# valid choices: repeated keys, then structure and types (schema), then names, parameter values,
# grids and published links, then what the jobs would hit (where results go, whether the data is
# there, whether the run can end).  A schema violation's full report goes to CONFIG_ERROR_LOG.
# The plan's estimate goes to stderr, one line.
CONFIG_ERROR_LOG = Path(".snakemake/log/fedbench_config_error.log")
SCHEMA = Path(workflow.basedir) / "workflow/schemas/config.schema.yaml"
try:
    normalise_config(config, SCHEMA)  # --config check_data=false as the boolean, ~ and $HOME in results expanded
    PLAN_ESTIMATE = validate_config(
        config,
        workflow.configfiles,
        schema=SCHEMA,
        published_csv=Path(workflow.basedir) / "config/published_results.csv",
        workplace=workplace(),
    )
except ConfigFileError as error:
    CONFIG_ERROR_LOG.parent.mkdir(parents=True, exist_ok=True)
    CONFIG_ERROR_LOG.write_text(f"{error.detail}\n")
    raise WorkflowError(f"Invalid fedbench config: {error} (full report: {CONFIG_ERROR_LOG})")
except ValueError as error:
    raise WorkflowError(f"Invalid fedbench config: {error}")
validate(config, "../schemas/config.schema.yaml")  # fills in the schema's defaults (path: relative to this file)
if PLAN_ESTIMATE is not None:
    print("\n".join([PLAN_ESTIMATE.line(), *PLAN_ESTIMATE.notes]), file=sys.stderr)


def look_file(paper, setting, look):
    """The claims' look ``look`` (a checkpoint: the DAG is re-evaluated once it exists)."""
    return checkpoints.claims_look.get(paper=paper, setting=setting, look=str(look)).output[0]


LEFT_OUT = leave_out_missing(config, Path.cwd())  # missing_data: skip: the cells whose data is not on disk
PLAN = WorkflowPlan(config, workflow.basedir, train_gpus(), look_file, LEFT_OUT)
RESULTS = PLAN.results
PUBLISHED_CSV = str(Path(workflow.basedir, "config", "published_results.csv"))  # the papers' numbers
