"""A Grafana stand-in for the compose test: Grafana is in no Debian package (nor on
PyPI or npm), and its image cannot be pulled here. This is NOT Grafana. It does the
part of Grafana's job that deploy/ configures, with Grafana's file formats and API
paths, so that the test checks hookd's files and not this program:

- reads the provisioning files (datasources, dashboard providers) as Grafana does,
  from /etc/grafana/provisioning, and loads every dashboard JSON file under each
  file provider's ``options.path``;
- answers ``GET /api/health``, ``/api/search``, ``/api/dashboards/uid/{uid}`` and
  ``/api/datasources`` (basic auth with GF_SECURITY_ADMIN_USER / _PASSWORD);
- ``POST /api/ds/query`` runs PromQL queries through a provisioned Prometheus
  datasource (its ``url``, reached over the compose network) and returns each
  query's status and result, or the error Prometheus gave.

A dashboard that does not parse, or names a datasource uid nothing provisions,
stops the start-up with one line, as a provisioning error shows in Grafana's log.
Standard library and PyYAML only.
"""

from __future__ import annotations

import base64
import hmac
import json
import os
import sys
import urllib.error
import urllib.parse
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import yaml

PROVISIONING = Path(os.environ.get("GF_PATHS_PROVISIONING", "/etc/grafana/provisioning"))
USER = os.environ.get("GF_SECURITY_ADMIN_USER", "admin")
PASSWORD = os.environ.get("GF_SECURITY_ADMIN_PASSWORD", "admin")
TEMPLATE_DATASOURCE = {"${datasource}", "$datasource"}


def load_yaml_dir(path: Path, key: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    for file in sorted(path.glob("*.y*ml")):
        doc = yaml.safe_load(file.read_text()) or {}
        items += doc.get(key) or []
    return items


def datasource_uids(node: Any) -> set[str]:
    """Every datasource uid a dashboard names (panels, targets, template variables)."""
    found: set[str] = set()
    if isinstance(node, dict):
        ds = node.get("datasource")
        if isinstance(ds, dict) and isinstance(ds.get("uid"), str):
            found.add(ds["uid"])
        for value in node.values():
            found |= datasource_uids(value)
    elif isinstance(node, list):
        for value in node:
            found |= datasource_uids(value)
    return found


def provision() -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]]]:
    datasources = {
        ds["uid"]: ds for ds in load_yaml_dir(PROVISIONING / "datasources", "datasources")
    }
    dashboards: dict[str, dict[str, Any]] = {}
    for provider in load_yaml_dir(PROVISIONING / "dashboards", "providers"):
        if provider.get("type", "file") != "file":
            continue
        folder = provider.get("folder", "")
        for file in sorted(Path(provider["options"]["path"]).rglob("*.json")):
            try:
                dashboard = json.loads(file.read_text())
            except ValueError as exc:
                sys.exit(f"grafana-standin: dashboard {file} is not JSON: {exc}")
            unknown = datasource_uids(dashboard) - set(datasources) - TEMPLATE_DATASOURCE
            if unknown:
                sys.exit(f"grafana-standin: dashboard {file} names unknown datasources {unknown}")
            dashboards[dashboard["uid"]] = {"dashboard": dashboard, "folder": folder}
    return datasources, dashboards


DATASOURCES, DASHBOARDS = provision()


def prometheus_query(ds: dict[str, Any], expr: str) -> dict[str, Any]:
    url = ds["url"].rstrip("/") + "/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            body = json.load(response)
        return {"status": 200, "frames": body["data"]["result"]}
    except urllib.error.HTTPError as exc:
        detail = json.loads(exc.read() or b"{}")
        return {"status": exc.code, "error": detail.get("error", str(exc))}
    except (OSError, ValueError) as exc:
        return {"status": 502, "error": f"datasource unreachable: {exc}"}


class Handler(BaseHTTPRequestHandler):
    def _send(self, status: int, body: Any) -> None:
        raw = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def _authorized(self) -> bool:
        expected = "Basic " + base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
        given = self.headers.get("Authorization", "")
        if hmac.compare_digest(given.encode(), expected.encode()):
            return True
        self._send(401, {"message": "Unauthorized"})
        return False

    def do_GET(self) -> None:
        path = urllib.parse.urlsplit(self.path).path
        if path == "/api/health":
            self._send(200, {"database": "ok", "version": "stand-in"})
            return
        if not self._authorized():
            return
        if path == "/api/search":
            self._send(
                200,
                [
                    {
                        "uid": uid,
                        "title": d["dashboard"].get("title"),
                        "type": "dash-db",
                        "folderTitle": d["folder"],
                    }
                    for uid, d in DASHBOARDS.items()
                ],
            )
        elif path.startswith("/api/dashboards/uid/"):
            found = DASHBOARDS.get(path.rsplit("/", 1)[1])
            if found is None:
                self._send(404, {"message": "Dashboard not found"})
                return
            meta = {"provisioned": True, "folderTitle": found["folder"]}
            self._send(200, {"dashboard": found["dashboard"], "meta": meta})
        elif path == "/api/datasources":
            self._send(200, list(DATASOURCES.values()))
        else:
            self._send(404, {"message": "Not found"})

    def do_POST(self) -> None:
        if urllib.parse.urlsplit(self.path).path != "/api/ds/query":
            self._send(404, {"message": "Not found"})
            return
        if not self._authorized():
            return
        length = int(self.headers.get("Content-Length") or 0)
        request = json.loads(self.rfile.read(length) or b"{}")
        results = {}
        for query in request.get("queries", []):
            ds = DATASOURCES.get((query.get("datasource") or {}).get("uid", ""))
            if ds is None or ds.get("type") != "prometheus":
                results[query.get("refId", "A")] = {"status": 400, "error": "unknown datasource"}
                continue
            results[query.get("refId", "A")] = prometheus_query(ds, query.get("expr", ""))
        self._send(200, {"results": results})

    def log_message(self, *_: Any) -> None:
        pass


if __name__ == "__main__":
    print(f"grafana-standin: {len(DASHBOARDS)} dashboard(s), {len(DATASOURCES)} datasource(s)")
    ThreadingHTTPServer(("0.0.0.0", 3000), Handler).serve_forever()
