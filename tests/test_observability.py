"""Observability as an operator runs it: `python -m app` (what `make run` starts) with JSON logs,
a real Prometheus (Debian's package) scraping it through the file Ray's head writes, the shipped
rules checked by promtool, the dashboard's queries against a real scrape, request ids across
every deployment's log, and `serve status` beside the service."""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import pytest
import yaml

from app.ops import metrics
from app.synthetic import pdf_bytes, render_text_page
from app.testkit.local_runner import local_runner
from tests.conftest import free_port

ROOT = Path(__file__).resolve().parent.parent
OBSERVABILITY = ROOT / "cluster" / "observability"
BIN = Path(sys.executable).parent
pytestmark = pytest.mark.own_cluster  # a Ray instance of its own, as `make run` is

ARGS = {"engine_threads": 1, "ocr_replicas": 2, "logging": {"format": "json"}}
# Series a CPU machine running the bundled engine cannot produce: no NVML; ppocr never marks a page
# invalid; no engine failure is provoked here. The app must still declare each of them.
NOT_ON_THIS_MACHINE = {"ray_ocr_gpu_utilization_ratio", "ray_ocr_gpu_memory_used_bytes",
                       "ray_ocr_gpu_memory_total_bytes", "ray_ocr_invalid_pages_total", "ray_ocr_engine_errors_total"}


def tool(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        raise RuntimeError(f"{name} is not installed: apt-get install prometheus (.ci/run does this)")
    return found


def png(image) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


@pytest.fixture(scope="module")
def service():
    """python -m app with JSON logs, in a fresh HOME (as on a new machine) and its own Ray temp dir."""
    work = Path(tempfile.mkdtemp(prefix="ocr-obs-"))  # short: Ray's socket paths live under it
    (work / "home").mkdir()
    config = work / "serve.yaml"
    config.write_text(yaml.safe_dump({"applications": [{"args": ARGS}]}))
    ports = {name: free_port() for name in ("http", "metrics", "dashboard")}
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "RAY_USAGE_STATS_ENABLED": "0", "HOME": str(work / "home")}
    env.pop("RAY_AUTH_MODE", None)
    arguments = ["--port", str(ports["http"]), "--num-cpus", "2", "--config", str(config),
                 "--data-dir", str(work / "data"), "--metrics-port", str(ports["metrics"]),
                 "--dashboard-port", str(ports["dashboard"]), "--temp-dir", str(work / "ray")]
    try:
        # two lines after the ready one: where to scrape, and the dashboard
        with local_runner(arguments, env, after_ready_lines=2) as runner:
            yield {"url": f"http://127.0.0.1:{ports['http']}", "ports": ports, "work": work, "env": env,
                   "printed": runner.printed}
    finally:
        shutil.rmtree(work, ignore_errors=True)


@pytest.fixture(scope="module")
def prometheus(service):
    """A real Prometheus on the shipped config: the shipped rules, targets from Ray's discovery file."""
    work = service["work"]
    config = yaml.safe_load((OBSERVABILITY / "prometheus.yml").read_text())
    config["global"].update(scrape_interval="1s", evaluation_interval="1s")
    config["rule_files"] = [str(OBSERVABILITY / "alerts.yml")]
    config["scrape_configs"][0]["file_sd_configs"][0].update(
        files=[str(work / "ray" / "prom_metrics_service_discovery.json")], refresh_interval="1s")
    (work / "prometheus.yml").write_text(yaml.safe_dump(config))
    port = free_port()
    process = subprocess.Popen([tool("prometheus"), f"--config.file={work / 'prometheus.yml'}",
                                f"--storage.tsdb.path={work / 'tsdb'}", f"--web.listen-address=127.0.0.1:{port}"],
                               stdout=subprocess.DEVNULL, stderr=open(work / "prometheus.log", "w"))
    api = f"http://127.0.0.1:{port}/api/v1"
    try:
        wait_for(lambda: scalar(api, 'count(up{job="ray"} == 1)') >= 1, 60, "Prometheus scraping the node")
        yield api
    finally:
        process.terminate()
        process.wait(timeout=30)


def query(api: str, promql: str) -> list:
    answer = httpx.get(f"{api}/query", params={"query": promql}, timeout=10).json()
    assert answer["status"] == "success", answer
    return answer["data"]["result"]


def scalar(api: str, promql: str) -> float:
    result = query(api, promql)
    return float(result[0]["value"][1]) if result else 0.0


def by_label(api: str, promql: str, label: str) -> dict:
    return {row["metric"].get(label, ""): float(row["value"][1]) for row in query(api, promql)}


def wait_for(condition, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            if condition():
                return
        except (httpx.HTTPError, ValueError) as exc:  # Prometheus still starting: 503, not JSON
            last = exc
        else:
            last = None
        assert time.monotonic() < deadline, f"timed out waiting for {what} ({last})"
        time.sleep(1)


def send_known_workload(url: str) -> dict:
    """7 pages in 3 requests (an image, a 2-page and a 4-page PDF), then 2 bad requests."""
    documents = [(png(render_text_page(["Invoice 1001"])), "image/png"),
                 (pdf_bytes([render_text_page([f"Page {n}"]) for n in range(2)]), "application/pdf"),
                 (pdf_bytes([render_text_page([f"Sheet {n}"]) for n in range(4)]), "application/pdf"),
                 (b"", "image/png"), (b"not an image at all", "image/png")]
    codes: dict = {}
    with httpx.Client(base_url=url, timeout=120) as client:
        for data, content_type in documents:
            answer = client.post("/v1/ocr", content=data, headers={"content-type": content_type})
            codes[str(answer.status_code)] = codes.get(str(answer.status_code), 0) + 1
    return codes


def test_prometheus_counts_exactly_the_pages_and_requests_sent(service, prometheus):
    ocr = 'route="/v1/ocr"'
    before = by_label(prometheus, f"sum by (code) (ray_ocr_requests_total{{{ocr}}})", "code")
    codes = send_known_workload(service["url"])
    assert codes == {"200": 3, "400": 1, "422": 1}, codes

    def counted() -> bool:
        now = by_label(prometheus, f"sum by (code) (ray_ocr_requests_total{{{ocr}}})", "code")
        return all(now.get(code, 0) - before.get(code, 0) == sent for code, sent in codes.items())

    wait_for(counted, 90, "the requests in Prometheus")
    wait_for(lambda: scalar(prometheus, "sum(ray_ocr_pages_total)") >= 7
             and scalar(prometheus, 'sum(ray_ocr_stage_seconds_count{stage="total"})') >= 3, 60, "the pages")
    time.sleep(12)  # one more export period of Ray's agent: nothing further may arrive
    assert by_label(prometheus, "sum by (outcome) (ray_ocr_pages_total)", "outcome") == {"ok": 7}
    after = by_label(prometheus, f"sum by (code) (ray_ocr_requests_total{{{ocr}}})", "code")
    assert {code: after[code] - before.get(code, 0) for code in after} == {"200": 3, "400": 1, "422": 1}
    stages = by_label(prometheus, "sum by (stage) (ray_ocr_stage_seconds_count)", "stage")
    # One image decoded, six PDF pages rendered; every page resized, turned upright (orientation:
    # auto), queued, OCR'd, postprocessed;
    # read_upload for the four bodies read (the empty one is refused while reading), total for the
    # three requests that succeeded.
    # Each page's layout and tables are read too (structure: auto, the StructureModel).
    assert stages == {"decode": 1, "render": 6, "resize_encode": 7, "orientation": 7, "queue_wait": 7, "postprocess": 7,
                      "structure_layout": 7, "structure_tables": 7, "read_upload": 4, "total": 3} | \
        {"engine": stages.get("engine")}, stages
    assert by_label(prometheus, "sum by (rotation) (ray_ocr_page_rotations_total)", "rotation") == {"0": 7}
    assert 1 <= stages["engine"] <= 7  # batches: 7 pages in between 1 and 7 engine calls
    # One observation per engine call in both batch histograms, every batch within max_batch_size 8.
    # How many pages share a batch depends on timing (a page that finds its replica idle starts
    # alone), but the mean the dashboard shows is exact: pages over batches. (Ray exports a
    # histogram's _sum from bucket midpoints, so _sum / _count would not be.)
    assert scalar(prometheus, "sum(ray_ocr_batch_pages_count)") == stages["engine"]
    assert scalar(prometheus, 'sum(ray_ocr_batch_pages_bucket{le=~"8|8.0"})') == stages["engine"]
    assert scalar(prometheus, "sum(ray_ocr_pages_total) / sum(ray_ocr_batch_pages_count)") == 7 / stages["engine"]
    assert scalar(prometheus, "sum(ray_ocr_batch_fill_ratio_count)") == stages["engine"]
    assert scalar(prometheus, 'sum(ray_ocr_batch_fill_ratio_bucket{le=~"1|1.0"})') == stages["engine"]
    p95 = scalar(prometheus, 'histogram_quantile(0.95, sum by (le) (ray_ocr_stage_seconds_bucket{stage="total"}))')
    assert 0 < p95 <= 10, p95  # the dashboard's latency query works on these buckets


def test_shipped_config_and_rules_pass_promtool():
    promtool = tool("promtool")
    for args in (["check", "config", "prometheus.yml"], ["check", "rules", "alerts.yml"],
                 ["test", "rules", "alerts_test.yml"]):
        done = subprocess.run([promtool, *args], cwd=OBSERVABILITY, capture_output=True, text=True)
        assert done.returncode == 0, (args, done.stdout, done.stderr)
    # The rules test must be able to fail: a rule that never fires fails it.
    broken = Path(tempfile.mkdtemp(prefix="ocr-rules-"))
    (broken / "alerts.yml").write_text((OBSERVABILITY / "alerts.yml").read_text().replace("> 0.01", "> 0.5"))
    shutil.copy(OBSERVABILITY / "alerts_test.yml", broken)
    done = subprocess.run([promtool, "test", "rules", "alerts_test.yml"], cwd=broken, capture_output=True, text=True)
    assert done.returncode != 0 and "OCRErrorRateHigh" in done.stdout + done.stderr


def dashboard_metric_names() -> set[str]:
    dashboard = json.loads((OBSERVABILITY / "grafana" / "ocr-dashboard.json").read_text())
    exprs = [target["expr"] for panel in dashboard["panels"] for target in panel["targets"]]
    return {name for expr in exprs for name in re.findall(r"\b(ray_[a-z_]+)\b", expr)}


def test_every_metric_the_dashboard_queries_is_in_a_real_scrape(service, prometheus):
    with httpx.Client(base_url=service["url"], timeout=120) as client:  # a job: the job series exist
        job = client.post("/v1/jobs", files={"file": ("d.png", png(render_text_page(["Job 7"])), "image/png")}).json()
        wait_for(lambda: client.get(f"/v1/jobs/{job['id']}").json()["status"] == "succeeded", 120, "the job")
    names = dashboard_metric_names()
    assert len(names) >= 15, names
    unknown = {name for name in NOT_ON_THIS_MACHINE if name not in metrics.exported_names()}
    assert not unknown, unknown

    def missing() -> set:
        text = httpx.get(f"http://127.0.0.1:{service['ports']['metrics']}/metrics", timeout=10).text
        scraped = {line.split("{")[0].split(" ")[0] for line in text.splitlines() if line and line[0] != "#"}
        return names - scraped - NOT_ON_THIS_MACHINE

    wait_for(lambda: not missing(), 60, "the job series")
    assert not missing()
    assert NOT_ON_THIS_MACHINE & names == NOT_ON_THIS_MACHINE  # the dashboard shows them where they exist


def test_a_request_id_is_in_the_log_of_every_deployment_it_passes(service):
    document = pdf_bytes([render_text_page(["Trace me"]), render_text_page(["And me"])])
    answer = httpx.post(f"{service['url']}/v1/ocr", content=document,
                        headers={"content-type": "application/pdf", "x-request-id": "abc"}, timeout=120)
    assert answer.status_code == 200 and answer.headers["x-request-id"] == "abc"
    logs = Path(service["work"]) / "ray" / "session_latest" / "logs" / "serve"

    def lines(deployment: str) -> list[dict]:
        records = [json.loads(line) for path in logs.glob(f"replica_ocr_{deployment}_*.log")
                   for line in path.read_text().splitlines() if line.startswith("{")]
        return [record for record in records if record.get("request_id") == "abc"
                or "abc" in (record.get("ocr") or {}).get("request_ids", [])]

    for deployment in ("Ingress", "Preprocessor", "OCRModel", "Postprocessor"):
        wait_for(lambda: lines(deployment), 15, f"request abc in the {deployment} log")
    request = [record["ocr"] for record in lines("Ingress") if "ocr" in record]
    assert len(request) == 1, request  # one line per request
    assert request[0] | {"ms": 0, "stages_ms": {}} == {
        "request_id": "abc", "method": "POST", "route": "/v1/ocr", "status": 200, "client": "-",
        "bytes": len(document), "pages": 2, "engine": "ppocr", "model_version": request[0]["model_version"],
        "ms": 0, "stages_ms": {}}
    assert set(request[0]["stages_ms"]) >= {"read_upload", "decode", "queue_wait", "engine", "postprocess"}
    batches = [record["ocr"] for record in lines("OCRModel") if "ocr" in record]
    assert sum(batch["pages"] for batch in batches) == 2 and all(batch["engine_ms"] > 0 for batch in batches)


def test_serve_status_works_beside_the_service(service):
    assert f"RAY_AUTH_MODE=token serve status -a http://127.0.0.1:{service['ports']['dashboard']}" \
        in service["printed"]
    done = subprocess.run([str(BIN / "serve"), "status", "-a", f"http://127.0.0.1:{service['ports']['dashboard']}"],
                          env={**service["env"], "RAY_AUTH_MODE": "token"}, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    status = yaml.safe_load(done.stdout)
    assert status["applications"]["ocr"]["status"] == "RUNNING"
    assert set(status["applications"]["ocr"]["deployments"]) >= {"Ingress", "Preprocessor", "OCRModel",
                                                                  "Postprocessor", "JobRunner"}


def listening_hosts(port: int) -> set[str]:
    """The local addresses a TCP socket listens on at `port` (/proc/net/tcp and tcp6; state 0A: LISTEN)."""
    hosts = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in open(table).readlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            address, port_hex = local.rsplit(":", 1)
            if state == "0A" and int(port_hex, 16) == port:
                if len(address) == 8:
                    hosts.add(".".join(str(int(address[i:i + 2], 16)) for i in (6, 4, 2, 0)))
                else:
                    hosts.add("::1" if address == "0" * 24 + "01000000" else address)
    return hosts


def test_under_make_run_the_ray_token_is_its_owners_only(service):
    """Issue 37.8: Ray wrote ~/.ray/auth_token 0644 on a fresh machine: any local user could reach the cluster."""
    token = service["work"] / "home" / ".ray" / "auth_token"
    assert token.stat().st_mode & 0o777 == 0o600 and len(token.read_text().strip()) == 64


def test_under_make_run_the_metrics_and_ray_listen_on_loopback_only(service):
    assert listening_hosts(service["ports"]["metrics"]) == {"127.0.0.1"}
    assert listening_hosts(service["ports"]["dashboard"]) == {"127.0.0.1"}
    assert listening_hosts(service["ports"]["http"]) == {"127.0.0.1"}  # --host's default
