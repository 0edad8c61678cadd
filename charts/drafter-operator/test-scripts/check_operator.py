"""`helm test` check: the drafter.dev CRDs are served and the operator answers on its metrics Service.

Standard library only (it runs in the operator image or any python3 image). Exits 0 when both hold,
1 with the reason otherwise. Retries for up to CHECK_TIMEOUT_SECONDS: a test run right after install
may start before the operator listens.
"""

import json
import os
import ssl
import sys
import time
import urllib.error
import urllib.request

SERVICE_ACCOUNT_DIR = os.environ.get("SERVICE_ACCOUNT_DIR", "/var/run/secrets/kubernetes.io/serviceaccount")
API = "https://{}:{}".format(os.environ["KUBERNETES_SERVICE_HOST"], os.environ["KUBERNETES_SERVICE_PORT"])
TIMEOUT = float(os.environ.get("CHECK_TIMEOUT_SECONDS", "60"))


def api_get(path):
    with open(os.path.join(SERVICE_ACCOUNT_DIR, "token")) as f:
        token = f.read().strip()
    context = ssl.create_default_context(cafile=os.path.join(SERVICE_ACCOUNT_DIR, "ca.crt"))
    request = urllib.request.Request(API + path, headers={"Authorization": "Bearer " + token})
    with urllib.request.urlopen(request, context=context, timeout=10) as response:
        return json.load(response)


def crds_served():
    """Discovery lists a CRD's resources only once it is Established."""
    served = {r["name"] for r in api_get("/apis/drafter.dev/v1alpha1").get("resources", [])}
    missing = [p for p in os.environ["CRD_PLURALS"].split(",") if p not in served]
    return "CRDs not served by the API: " + ", ".join(missing) if missing else None


def metrics_answer():
    namespace, name = os.environ["METRICS_NAMESPACE"], os.environ["METRICS_SERVICE"]
    service = api_get("/api/v1/namespaces/{}/services/{}".format(namespace, name))
    port = next(p["port"] for p in service["spec"]["ports"] if p.get("name") == "metrics")
    url = "http://{}:{}/metrics".format(service["spec"]["clusterIP"], port)
    with urllib.request.urlopen(url, timeout=10) as response:
        body = response.read().decode(errors="replace")
    if "# TYPE drafter_reconcile_total counter" not in body:
        return "{} answered without the operator's drafter_reconcile_total: not the operator".format(url)
    print("ok: {} answered with the operator's metrics ({} bytes)".format(url, len(body)))
    return None


def main():
    deadline = time.monotonic() + TIMEOUT
    while True:
        try:
            problem = crds_served() or metrics_answer()
        except (OSError, urllib.error.URLError, KeyError, StopIteration, ValueError) as exc:
            problem = "{}: {}".format(type(exc).__name__, exc)
        if problem is None:
            print("ok: CRDs served: " + os.environ["CRD_PLURALS"])
            return 0
        if time.monotonic() > deadline:
            print("FAILED after {:.0f}s: {}".format(TIMEOUT, problem), file=sys.stderr)
            return 1
        time.sleep(2)


if __name__ == "__main__":
    sys.exit(main())
