"""The deployment files in ``deploy/`` are well formed and agree with the code.

``deploy/prefect.yaml``: each entrypoint imports and is the named Prefect flow, its
parameters validate against the flow's parameter model and JSON schema, every model
field is documented there, the cron schedule parses, and the event trigger renders
valid parameters from an ``imagery.prediction.available`` event the way the Prefect
server does. The compose, Kubernetes and SLURM files parse and are consistent with
each other. Nothing here starts a server or a cluster (``test_local_stack.py`` does).
"""

from __future__ import annotations

import copy
import datetime as dt
import inspect
import json
import re
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
PREFECT_YAML = DEPLOY / "prefect.yaml"
CONFIG = yaml.safe_load(PREFECT_YAML.read_text())
DEPLOYMENTS = {d["name"]: d for d in CONFIG["deployments"]}

# deployment -> (flow name, parameter model in flows.params)
EXPECTED = {
    "national-evaluation": ("evaluate-layers", "EvaluateParams"),
    "reevaluate-new-imagery": ("reevaluate-new-imagery", "ReevaluateParams"),
}
EVENT = "imagery.prediction.available"


@pytest.fixture(autouse=True)
def prefect_harness():
    """Override tests/flows/conftest.py's session server: nothing here talks to an API."""
    yield


def _entrypoint(deployment: dict) -> tuple[Path, str]:
    path, _, function = deployment["entrypoint"].partition(":")
    return ROOT / path, function


def _load_flow(name: str):
    from prefect.flows import load_flow_from_entrypoint

    path, function = _entrypoint(DEPLOYMENTS[name])
    if not path.exists():
        pytest.skip(f"{path.relative_to(ROOT)} does not exist yet (another change adds it)")
    return load_flow_from_entrypoint(f"{path}:{function}")


def _model(name: str):
    import flows.params

    model_name = EXPECTED[name][1]
    if not hasattr(flows.params, model_name):
        pytest.skip(f"flows.params.{model_name} does not exist yet (another change adds it)")
    return getattr(flows.params, model_name)


def test_the_two_deployments_and_their_pools():
    assert set(DEPLOYMENTS) == set(EXPECTED)
    for deployment in DEPLOYMENTS.values():
        assert deployment["work_pool"]["name"] == "evalcore-process"
        assert deployment["enforce_parameter_schema"] is True
    assert DEPLOYMENTS["national-evaluation"]["entrypoint"] == "flows/evaluate.py:evaluate_layers"
    assert DEPLOYMENTS["reevaluate-new-imagery"]["entrypoint"] == "flows/reevaluate.py:reevaluate_new_imagery"
    assert DEPLOYMENTS["national-evaluation"]["schedules"] == []  # on demand only


def test_pull_step_goes_to_the_checkout_named_by_the_environment(monkeypatch):
    from prefect.utilities.templating import apply_values

    (step,) = CONFIG["pull"]
    assert list(step) == ["prefect.deployments.steps.set_working_directory"]
    inputs = step["prefect.deployments.steps.set_working_directory"]
    # The flow-run process resolves {{ $EVALCORE_ROOT }} from its environment, which it
    # inherits from the worker (start.sh exports it; the image sets it).
    monkeypatch.setenv("EVALCORE_ROOT", "/srv/evalcore")
    assert apply_values(inputs, {}) == {"directory": "/srv/evalcore"}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_entrypoint_is_the_named_flow(name):
    from prefect import Flow

    flow = _load_flow(name)
    assert isinstance(flow, Flow)
    assert flow.name == EXPECTED[name][0]
    assert flow.fn.__name__ == _entrypoint(DEPLOYMENTS[name])[1]
    assert list(flow.parameters.properties) == ["params"]


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_parameters_validate_against_the_flow(name):
    from prefect.utilities.callables import parameter_schema
    from prefect.utilities.schema_tools.validation import validate

    flow, model = _load_flow(name), _model(name)
    parameters = copy.deepcopy(DEPLOYMENTS[name]["parameters"])
    # Fill required fields the file may leave out (none today: it gives examples).
    for field, info in model.model_fields.items():
        if info.is_required():
            parameters["params"].setdefault(field, f"/placeholder/{field}")
    params = model.model_validate(parameters["params"])
    assert params.cluster == CONFIG["definitions"]["dask_cluster"]
    # What the server checks (enforce_parameter_schema) and what the flow run does.
    validate(parameters, parameter_schema(flow).model_dump_for_openapi(), raise_on_error=True)
    assert isinstance(flow.validate_parameters(parameters)["params"], model)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_every_model_field_is_given_with_a_comment(name):
    model = _model(name)
    given = DEPLOYMENTS[name]["parameters"]["params"]
    assert set(given) == set(model.model_fields), "document new fields in deploy/prefect.yaml"
    text = PREFECT_YAML.read_text()
    for field in model.model_fields:
        # a comment on the line or on the line(s) just above the key
        pattern = rf"(#[^\n]*\n\s*(#[^\n]*\n\s*)*{field}:|\n\s*{field}:[^\n]*#)"
        assert re.search(pattern, text), f"{name}: field {field!r} has no comment in deploy/prefect.yaml"


def test_nightly_schedule_parses():
    from cronsim import CronSim
    from prefect.client.schemas.schedules import CronSchedule

    (schedule,) = DEPLOYMENTS["reevaluate-new-imagery"]["schedules"]
    assert schedule["timezone"] == "UTC" and schedule["active"] is True
    CronSchedule(cron=schedule["cron"], timezone=schedule["timezone"])
    start = dt.datetime(2026, 3, 1, 12, 0, tzinfo=dt.timezone.utc)
    runs = CronSim(schedule["cron"], start)
    assert [next(runs) for _ in range(2)] == [
        dt.datetime(2026, 3, 2, 2, 0, tzinfo=dt.timezone.utc),
        dt.datetime(2026, 3, 3, 2, 0, tzinfo=dt.timezone.utc),
    ]


def test_trigger_expects_the_new_predictions_event():
    from prefect.events import DeploymentTriggerTypes
    from prefect.events.schemas.events import Resource
    from pydantic import TypeAdapter

    (spec,) = DEPLOYMENTS["reevaluate-new-imagery"]["triggers"]
    trigger = TypeAdapter(DeploymentTriggerTypes).validate_python(copy.deepcopy(spec))
    assert trigger.expect == {EVENT}
    assert trigger.posture == "Reactive" and trigger.threshold == 1
    assert trigger.match.matches(Resource({"prefect.resource.id": "evalcore.predictions.fields-ml"}))
    assert not trigger.match.matches(Resource({"prefect.resource.id": "prefect.flow-run.1234"}))
    # The command the docs give a storage notifier (`prefect event emit EVENT
    # --resource-id ... --payload ...`) has these options.
    from prefect.cli.events import emit

    assert {"event", "resource_id", "payload"} <= set(inspect.signature(emit).parameters)


@pytest.mark.parametrize(
    ("payload", "predictions"),
    [({"predictions": "s3://imagery/predictions/fields-v4/"}, "s3://imagery/predictions/fields-v4/"), ({}, "/data/predictions/fields-v4")],
    ids=["with-payload", "without-payload"],
)
def test_trigger_parameters_render_from_the_event(payload, predictions):
    """Render the trigger's templates as the server's RunDeployment action does."""
    from prefect.server.events.actions import RunDeployment
    from prefect.server.events.schemas.events import Event
    from prefect.utilities.schema_tools.hydration import HydrationContext, hydrate

    (spec,) = DEPLOYMENTS["reevaluate-new-imagery"]["triggers"]
    event = Event(
        id=uuid.uuid4(),
        occurred=dt.datetime.now(dt.timezone.utc),
        event=EVENT,
        resource={"prefect.resource.id": "evalcore.predictions.fields-v4"},
        payload=payload,
    ).receive()
    parameters = copy.deepcopy(spec["parameters"])
    RunDeployment(source="selected", deployment_id=uuid.uuid4(), parameters=parameters)  # the server's check
    RunDeployment._upgrade_v1_templates(parameters)
    rendered = hydrate(parameters, HydrationContext(render_jinja=True, jinja_context={"event": event}, raise_on_error=True))
    params = _model("reevaluate-new-imagery").model_validate(rendered["params"])
    assert params.product == "fields-v4"
    assert params.predictions == predictions
    # Everything else is the nightly run's configuration.
    nightly = DEPLOYMENTS["reevaluate-new-imagery"]["parameters"]["params"]
    assert {k: v for k, v in rendered["params"].items() if k not in ("product", "predictions")} == {
        k: v for k, v in nightly.items() if k not in ("product", "predictions")
    }


def test_kubernetes_pool_variables_exist_in_the_base_job_template():
    template = json.loads((DEPLOY / "kubernetes" / "base-job-template.json").read_text())
    variables = template["variables"]["properties"]
    pool = CONFIG["definitions"]["work_pools"]["kubernetes"]
    assert pool["name"] == "evalcore-k8s"
    assert set(pool["job_variables"]) <= set(variables)
    # Every placeholder of the job configuration is a declared variable.
    placeholders = set(re.findall(r"\{\{\s*([\w.]+)\s*\}\}", json.dumps(template["job_configuration"])))
    assert placeholders <= set(variables), placeholders - set(variables)
    pod = template["job_configuration"]["job_manifest"]["spec"]["template"]["spec"]
    assert pod["containers"][0]["volumeMounts"] == [{"name": "data", "mountPath": "/data"}]
    assert variables["namespace"]["default"] == pool["job_variables"]["namespace"]


def test_kubernetes_manifests():
    cluster = yaml.safe_load((DEPLOY / "kubernetes" / "daskcluster.yaml").read_text())
    assert cluster["apiVersion"] == "kubernetes.dask.org/v1" and cluster["kind"] == "DaskCluster"
    spec = cluster["spec"]
    assert spec["worker"]["replicas"] >= 1
    (worker,) = spec["worker"]["spec"]["containers"]
    assert worker["args"][:2] == ["dask", "worker"] and worker["resources"]["limits"]["memory"]
    (scheduler,) = spec["scheduler"]["spec"]["containers"]
    assert scheduler["args"][:2] == ["dask", "scheduler"]
    ports = {p["name"]: p["port"] for p in spec["scheduler"]["service"]["ports"]}
    assert ports == {"tcp-comm": 8786, "http-dashboard": 8787}
    assert spec["scheduler"]["metadata"]["annotations"]["prometheus.io/path"] == "/metrics"
    name, namespace = cluster["metadata"]["name"], cluster["metadata"]["namespace"]
    # The address the docs and prefect.yaml give flows on Kubernetes.
    address = f"tcp://{name}-scheduler.{namespace}.svc.cluster.local:8786"
    assert address in (DEPLOY / "kubernetes" / "README.md").read_text()
    assert address in PREFECT_YAML.read_text()

    kinds = [d["kind"] for d in yaml.safe_load_all((DEPLOY / "kubernetes" / "base.yaml").read_text())]
    assert kinds == ["Namespace", "ServiceAccount", "PersistentVolumeClaim"]
    monitor = yaml.safe_load((DEPLOY / "kubernetes" / "servicemonitor.yaml").read_text())
    assert monitor["spec"]["endpoints"][0] == {"port": "http-dashboard", "path": "/metrics", "interval": "15s"}
    values = yaml.safe_load((DEPLOY / "kubernetes" / "prefect-worker-values.yaml").read_text())
    assert values["worker"]["apiConfig"] == "selfHostedServer"
    assert values["worker"]["selfHostedServerApiConfig"]["apiUrl"].endswith("/api")
    assert (values["worker"]["config"]["workPool"], values["worker"]["config"]["type"]) == ("evalcore-k8s", "kubernetes")


def test_compose_file():
    compose = yaml.safe_load((DEPLOY / "compose" / "compose.yaml").read_text())
    services = compose["services"]
    assert set(services) == {"prefect-server", "dask-scheduler", "dask-worker", "prefect-worker"}
    for name, service in services.items():
        assert service["healthcheck"]["test"][0] == "CMD", name
        assert "evalcore-data:/data" in service["volumes"], name
        assert service["build"]["dockerfile"] == "deploy/compose/Dockerfile"
        for port in service.get("ports", []):
            assert port.startswith("127.0.0.1:"), f"{name} publishes {port} beyond loopback"
    assert services["dask-worker"]["deploy"]["replicas"] >= 2
    assert services["dask-worker"]["command"][2] == "tcp://dask-scheduler:8786"
    assert services["prefect-worker"]["environment"]["PREFECT_API_URL"] == "http://prefect-server:4200/api"
    assert services["prefect-worker"]["environment"]["EVALCORE_ROOT"] == "/opt/evalcore"
    assert "evalcore-data" in compose["volumes"]

    dockerfile = (DEPLOY / "compose" / "Dockerfile").read_text()
    assert re.search(r"^FROM python:3\.11-slim$", dockerfile, re.M)
    assert "pip install --no-deps ." in dockerfile and "COPY pyproject.toml" in dockerfile
    user = re.findall(r"^USER (\S+)$", dockerfile, re.M)
    assert user and not user[-1].startswith(("root", "0")), "the image must not run as root"


def test_slurm_profile_uses_dask_jobqueue_keys():
    import dask.config

    profile = yaml.safe_load((DEPLOY / "slurm" / "jobqueue.yaml").read_text())
    slurm = profile["jobqueue"]["slurm"]
    known = {  # dask-jobqueue 0.9's jobqueue.slurm keys (dask_jobqueue/jobqueue.yaml)
        "name", "cores", "memory", "processes", "python", "interface", "death-timeout",
        "local-directory", "shared-temp-directory", "extra", "worker-command",
        "worker-extra-args", "shebang", "queue", "account", "walltime", "env-extra",
        "job-script-prologue", "job-cpu", "job-mem", "job-extra", "job-extra-directives",
        "job-directives-skip", "log-directory", "scheduler-options",
    }  # fmt: skip
    assert set(slurm) <= known, set(slurm) - known
    assert slurm["cores"] == slurm["processes"]  # one single-threaded process per core
    assert re.fullmatch(r"\d+:\d\d:\d\d", slurm["walltime"])
    # Dask reads these with either spelling (SLURMCluster(job_extra_directives=...)).
    with dask.config.set(profile):
        assert dask.config.get("jobqueue.slurm.job_extra_directives") == slurm["job-extra-directives"]
        assert dask.config.get("jobqueue.slurm.worker_extra_args") == slurm["worker-extra-args"]
    # Durations in worker-extra-args must parse (dask rejects compound ones like 3h50m).
    from dask.utils import parse_timedelta

    args = slurm["worker-extra-args"]
    for flag in ("--lifetime", "--lifetime-stagger"):
        assert parse_timedelta(args[args.index(flag) + 1]) > 0


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
@pytest.mark.parametrize("script", ["local/env.sh", "local/start.sh", "local/stop.sh", "slurm/evaluate.sbatch", "object-store/walkthrough-s3.sh"])
def test_shell_scripts_parse(script):
    subprocess.run(["bash", "-n", str(DEPLOY / script)], check=True)


def test_slurm_runner_script_compiles():
    source = (DEPLOY / "slurm" / "run_jobqueue.py").read_text()
    compile(source, "run_jobqueue.py", "exec")


def test_documented_deploy_command_uses_real_flags():
    """The commands docs/operations.md gives use flags this Prefect has."""
    from prefect.cli.deploy import _commands

    source = Path(_commands.__file__).read_text()
    assert '"--prefect-file"' in source and '"--all"' in source
    docs = (ROOT / "docs" / "operations.md").read_text()
    assert "prefect deploy --prefect-file deploy/prefect.yaml --all" in docs
    assert f"prefect event emit {EVENT} --resource-id evalcore.predictions." in docs


def test_compose_object_store_variant_has_no_shared_volume():
    """compose.object-store.yaml: the same stack on a store (MinIO here), no volume shared by the evalcore services."""
    compose = yaml.safe_load((DEPLOY / "compose" / "compose.object-store.yaml").read_text())
    services = compose["services"]
    assert {"prefect-server", "dask-scheduler", "dask-worker", "prefect-worker"} <= set(services)
    evalcore_services = {name: s for name, s in services.items() if s.get("build")}
    for name, service in evalcore_services.items():
        assert service["build"]["dockerfile"] == "deploy/compose/Dockerfile"
        assert "s3" in service["build"]["args"]["EVALCORE_EXTRAS"]
        mounted = [v.split(":")[0] for v in service.get("volumes", [])]
        assert "evalcore-data" not in mounted, name
    for name, service in services.items():
        assert service["healthcheck"]["test"][0] == "CMD", name
        for port in service.get("ports", []):
            assert port.startswith("127.0.0.1:"), f"{name} publishes {port} beyond loopback"
    # Only one service mounts each volume: nothing is shared through a file system.
    mounts = [v.split(":")[0] for s in services.values() for v in s.get("volumes", [])]
    assert len(mounts) == len(set(mounts))
    assert "evalcore-data" not in compose.get("volumes", {})
    for name in ("dask-worker", "prefect-worker"):  # the processes that read and write the store
        env = services[name]["environment"]
        assert {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_ENDPOINT_URL"} <= set(env), name
        assert env["AWS_SECRET_ACCESS_KEY"].startswith("${"), "the secret comes from the environment, never the file"
    assert services["dask-worker"]["command"][2] == "tcp://dask-scheduler:8786"
    dockerfile = (DEPLOY / "compose" / "Dockerfile").read_text()
    assert "ARG EVALCORE_EXTRAS" in dockerfile and "optional-dependencies" in dockerfile


def test_dockerfile_extras_resolve_to_the_declared_optional_dependencies():
    """The Dockerfile's requirement line, run here with EVALCORE_EXTRAS=s3, lists the s3 extra's packages."""
    import os
    import subprocess
    import sys

    dockerfile = (DEPLOY / "compose" / "Dockerfile").read_text()
    code = re.search(r'RUN python -c "(import os, tomllib;.*?)" > /tmp/requirements.txt', dockerfile).group(1).replace("\\n", "\n")
    root = DEPLOY.parent
    listed = subprocess.run([sys.executable, "-c", code.replace("\n", "\\n")], cwd=root, capture_output=True, text=True,
                            env=dict(os.environ, EVALCORE_EXTRAS="s3"), check=True).stdout.split("\n")
    assert any(line.startswith("s3fs") for line in listed)
    plain = subprocess.run([sys.executable, "-c", code.replace("\n", "\\n")], cwd=root, capture_output=True, text=True,
                           env={k: v for k, v in os.environ.items() if k != "EVALCORE_EXTRAS"}, check=True).stdout
    assert "s3fs" not in plain


def test_kubernetes_object_store_variant():
    """daskcluster-object-store.yaml: the same cluster (same scheduler address), no PersistentVolumeClaim, credentials from a Secret."""
    shared = yaml.safe_load((DEPLOY / "kubernetes" / "daskcluster.yaml").read_text())
    cluster = yaml.safe_load((DEPLOY / "kubernetes" / "daskcluster-object-store.yaml").read_text())
    assert cluster["metadata"] == shared["metadata"] and cluster["kind"] == "DaskCluster"
    pod = cluster["spec"]["worker"]["spec"]
    assert not [v for v in pod["volumes"] if "persistentVolumeClaim" in v]
    (worker,) = pod["containers"]
    assert [m["mountPath"] for m in worker["volumeMounts"]] == ["/tmp"]
    secret = yaml.safe_load((DEPLOY / "kubernetes" / "store-secret.example.yaml").read_text())
    assert worker["envFrom"] == [{"secretRef": {"name": secret["metadata"]["name"]}}]
    assert secret["kind"] == "Secret" and secret["metadata"]["namespace"] == cluster["metadata"]["namespace"]
    assert worker["args"] == shared["spec"]["worker"]["spec"]["containers"][0]["args"]
    template = json.loads((DEPLOY / "kubernetes" / "base-job-template-object-store.json").read_text())
    variables = template["variables"]["properties"]
    placeholders = set(re.findall(r"\{\{\s*([\w.]+)\s*\}\}", json.dumps(template["job_configuration"])))
    assert placeholders <= set(variables), placeholders - set(variables)
    job = template["job_configuration"]["job_manifest"]["spec"]["template"]["spec"]
    assert "volumes" not in job and "volumeMounts" not in job["containers"][0]
    assert job["containers"][0]["envFrom"] == [{"secretRef": {"name": "{{ store_secret }}"}}]
    assert variables["store_secret"]["default"] == secret["metadata"]["name"]
