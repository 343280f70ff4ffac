"""The HTTP layer of the local Hub stand-in (tests/hub_stub.py): the request handler that routes the Hub API's
endpoints (listed in hub_stub.py's docstring) to a `HubStub`'s repositories, and answers anything else 501."""

from __future__ import annotations

import hashlib
import json
import logging
import re
from http.server import BaseHTTPRequestHandler
from urllib.parse import parse_qs, unquote, urlsplit

from tests.hub_stub import (
    STUB_USER,
    HubError,
    HubStub,
    Repo,
    git_blob_sha1,
    validate_card_metadata,
)

logger = logging.getLogger("tests.hub_stub")

# ---- the HTTP layer -------------------------------------------------------------------------------------------------

_API = re.compile(r"^/api/(?P<kind>models|datasets)/(?P<repo>[^/]+/[^/]+)(?P<rest>/.*)?$")
# Dataset files are under /datasets/; "datasets" is a reserved name on the Hub, so no model repo is "datasets/x".
_LFS_BATCH = re.compile(r"^/(?P<kind>datasets/)?(?P<repo>[^/]+/[^/]+)\.git/info/lfs/objects/batch$")
_LFS_OBJECT = re.compile(r"^/lfs-objects/(?P<oid>[0-9a-f]{64})$")
_RESOLVE = re.compile(r"^/(?P<kind>datasets/)?(?P<repo>[^/]+/[^/]+)/resolve/(?P<revision>[^/]+)/(?P<path>.+)$")
_REPO_TYPES = {"models": "model", "datasets": "dataset", "datasets/": "dataset", None: "model"}


def make_handler(stub: HubStub):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        server_version = "hub-stub/1.0"

        # -- plumbing --
        def log_message(self, format, *args):
            logger.debug("hub_stub: " + format, *args)

        def _body(self) -> bytes:
            return self._raw_body

        def _read_body(self) -> bytes:
            """The whole request body, read before routing so that a keep-alive connection stays in sync."""
            if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                chunks = []
                while True:
                    size = int(self.rfile.readline().strip().split(b";")[0], 16)
                    if size == 0:
                        self.rfile.readline()
                        return b"".join(chunks)
                    chunks.append(self.rfile.read(size))
                    self.rfile.readline()
            return self.rfile.read(int(self.headers.get("Content-Length") or 0))

        def _json_body(self):
            body = self._body()
            return json.loads(body) if body else {}

        def _send(self, status: int, body: bytes = b"", headers: dict | None = None, content_type="application/json"):
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            for key, value in (headers or {}).items():
                self.send_header(key, value)
            if "Content-Length" not in (headers or {}):
                self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            # Logged before the body is written: a client that has its answer has been logged.
            with stub._lock:
                stub.requests.append((self.command, self.path, status))
            if self.command != "HEAD":
                self.wfile.write(body)

        def _send_json(self, status: int, payload, headers: dict | None = None):
            self._send(status, json.dumps(payload).encode(), headers)

        @property
        def authorized(self) -> bool:
            return self.headers.get("Authorization", "").startswith("Bearer ")

        def _require_token(self):
            if not self.authorized:
                raise HubError(401, "Invalid credentials in Authorization header")

        def _dispatch(self):
            self._raw_body = self._read_body()
            try:
                if not self._route():
                    message = f"hub_stub: no handler for {self.command} {self.path}"
                    logger.warning(message)
                    with stub._lock:
                        stub.unhandled.append(f"{self.command} {self.path}")
                    self._send_json(501, {"error": message}, {"X-Error-Message": message})
            except HubError as error:
                self._send_error(error)
            except Exception as error:  # a bug in the stub: say so in the response, not just in the server log
                logger.exception("hub_stub: %s %s failed", self.command, self.path)
                message = f"hub_stub: {type(error).__name__}: {error}".replace("\n", " ")
                self._send_json(500, {"error": message}, {"X-Error-Message": message[:500]})

        do_GET = do_HEAD = do_POST = do_PUT = do_DELETE = _dispatch

        # -- routes --
        def _route(self) -> bool:
            url = urlsplit(self.path)
            path, query = url.path, parse_qs(url.query)
            method = self.command

            if method == "POST" and path == "/api/repos/create":
                self._require_token()
                status, payload = stub.create_repo(self._json_body())
                self._send_json(status, payload)
                return True
            if method == "POST" and path == "/api/validate-yaml":
                content = self._json_body().get("content", "")
                errors = validate_card_metadata(content)
                self._send_json(400 if errors else 200, {"errors": [{"message": e} for e in errors], "warnings": []})
                return True
            if method == "GET" and path in ("/api/whoami-v2", "/api/whoami"):
                self._require_token()
                self._send_json(
                    200,
                    {
                        "type": "user",
                        "name": STUB_USER,
                        "fullname": "Hub Stub",
                        "orgs": [],
                        "auth": {"type": "access_token", "accessToken": {"displayName": "stub", "role": "write"}},
                    },
                )
                return True

            match = _API.match(path)
            if match:
                repo_type = _REPO_TYPES[match.group("kind")]
                return self._api(unquote(match.group("repo")), match.group("rest") or "", query, repo_type)
            match = _LFS_BATCH.match(path)
            if match and method == "POST":
                self._require_token()
                with stub._lock:
                    stub._repo(unquote(match.group("repo")), True, _REPO_TYPES[match.group("kind")])
                    answer = stub.lfs_batch(self._json_body())
                self._send_json(200, answer)
                return True
            match = _LFS_OBJECT.match(path)
            if match and method == "PUT":  # the upload action's href (S3 on the Hub: no token)
                content, oid = self._body(), match.group("oid")
                if hashlib.sha256(content).hexdigest() != oid:
                    raise HubError(400, f"hub_stub: the uploaded content does not hash to {oid}")
                with stub._lock:
                    stub.lfs_objects[oid] = content
                self._send(200, b"")
                return True
            if method == "POST" and path == "/lfs-verify":
                self._require_token()
                payload = self._json_body()
                stored = stub.lfs_objects.get(payload.get("oid", ""))
                if stored is None or len(stored) != payload.get("size"):
                    raise HubError(404, f"hub_stub: LFS object {payload.get('oid')} not uploaded (or another size)")
                self._send_json(200, {})
                return True
            match = _RESOLVE.match(path)
            if match and method in ("GET", "HEAD"):
                repo_type = _REPO_TYPES[match.group("kind")]
                repo_id, revision = unquote(match.group("repo")), unquote(match.group("revision"))
                self._resolve(repo_id, revision, unquote(match["path"]), repo_type)
                return True
            return False

        def _api(self, repo_id: str, rest: str, query: dict, repo_type: str) -> bool:
            method = self.command
            parts = [unquote(part) for part in rest.split("/")[1:]] if rest else []
            with stub._lock:
                repo = stub._repo(repo_id, self.authorized, repo_type)
            if method == "GET" and not parts:
                self._send_json(200, stub.repo_info(repo, None))
                return True
            if method == "GET" and parts[0] == "revision" and len(parts) >= 2:
                self._send_json(200, stub.repo_info(repo, "/".join(parts[1:])))
                return True
            if method == "GET" and parts[0] == "tree" and len(parts) >= 2:
                recursive = query.get("recursive", ["false"])[0].lower() in ("1", "true")
                revision, tree_path = _split_revision(repo, parts[1:])
                self._send_json(200, stub.tree(repo, revision, tree_path, recursive))
                return True
            if method == "GET" and parts == ["refs"]:
                branches = [
                    {"name": ref, "ref": f"refs/heads/{ref}", "targetCommit": oid}
                    for ref, oid in repo.refs.items()
                    if not ref.startswith("refs/")
                ]
                pulls = [
                    {"name": ref, "ref": ref, "targetCommit": oid}
                    for ref, oid in repo.refs.items()
                    if ref.startswith("refs/pr/")
                ]
                payload = {"branches": branches, "tags": [], "converts": []}
                if query.get("include_prs"):
                    payload["pullRequests"] = pulls
                self._send_json(200, payload)
                return True
            if method == "POST" and parts and parts[0] == "paths-info":
                revision = "/".join(parts[1:])
                body = self._body()
                if self.headers.get("Content-Type", "").startswith("application/json"):
                    paths = json.loads(body).get("paths", [])
                else:
                    paths = parse_qs(body.decode()).get("paths", [])
                commit = stub._commit(repo, revision)
                self._send_json(200, [commit.entry(p) for p in paths if p in commit.files])
                return True

            # -- writes --
            if method == "POST" and len(parts) >= 2 and parts[0] == "branch":
                self._require_token()
                payload = self._json_body()
                branch = "/".join(parts[1:])
                with stub._lock:
                    if branch in repo.refs:
                        raise HubError(409, f"Branch {branch} already exists")
                    start = stub._commit(repo, payload.get("startingPoint") or "main")
                    repo.refs[branch] = start.oid
                self._send_json(200, {})
                return True
            if method == "POST" and len(parts) >= 2 and parts[0] == "preupload":
                self._require_token()
                revision = "/".join(parts[1:])
                payload = self._json_body()
                with stub._lock:
                    commit = repo.resolve(revision)
                files = []
                for f in payload.get("files", []):
                    mode = stub.upload_mode(commit, f["path"], f.get("size", 0))
                    # The remote oid the client compares with its own to skip unchanged files: the sha256 of an LFS
                    # file's content, the git blob sha1 of a regular file.
                    oid = None
                    if commit is not None and f["path"] in commit.files:
                        entry = commit.entry(f["path"])
                        oid = entry["lfs"]["oid"] if "lfs" in entry else entry["oid"]
                    files.append({"path": f["path"], "uploadMode": mode, "shouldIgnore": False, "oid": oid})
                self._send_json(200, {"files": files, "commitOid": commit.oid if commit else None})
                return True
            if method == "POST" and len(parts) >= 2 and parts[0] == "commit":
                self._require_token()
                revision = "/".join(parts[1:])
                create_pr = query.get("create_pr", ["0"])[0] in ("1", "true")
                self._send_json(200, stub.commit(repo, revision, self._body(), create_pr))
                return True
            return False

        def _resolve(self, repo_id: str, revision: str, file_path: str, repo_type: str):
            with stub._lock:
                repo = stub._repo(repo_id, self.authorized, repo_type)
                commit = stub._commit(repo, revision)
                content = commit.files.get(file_path)
            if content is None:
                raise _EntryNotFound(commit.oid, f"{file_path} does not exist at {revision}")
            etag = f'"{git_blob_sha1(content)}"'
            headers = {"X-Repo-Commit": commit.oid, "ETag": etag, "Accept-Ranges": "bytes"}
            if file_path in commit.lfs:
                # The Hub answers an LFS file with a redirect to its CDN, carrying the object's sha256 and size in
                # X-Linked-*; the stub serves the content itself, with the same headers.
                sha256 = f'"{hashlib.sha256(content).hexdigest()}"'
                headers.update({"ETag": sha256, "X-Linked-Etag": sha256, "X-Linked-Size": str(len(content))})
            range_header = self.headers.get("Range")
            match = re.fullmatch(r"bytes=(\d+)-(\d*)", range_header or "")
            if match and self.command == "GET":
                start = int(match.group(1))
                end = int(match.group(2)) if match.group(2) else len(content) - 1
                part = content[start : end + 1]
                headers["Content-Range"] = f"bytes {start}-{start + len(part) - 1}/{len(content)}"
                self._send(206, part, headers, content_type="application/octet-stream")
                return
            headers["Content-Length"] = str(len(content))
            self.send_response(200)
            self.send_header("Content-Type", "application/octet-stream")
            for key, value in headers.items():
                self.send_header(key, value)
            self.end_headers()
            with stub._lock:
                stub.requests.append((self.command, self.path, 200))
            if self.command == "GET":
                self.wfile.write(content)

        def _send_error(self, error: HubError):
            headers = {"X-Error-Message": error.message}
            if error.error_code:
                headers["X-Error-Code"] = error.error_code
            if isinstance(error, _EntryNotFound):
                headers["X-Repo-Commit"] = error.commit_oid  # the client caches the miss under this commit
            self._send_json(error.status, {"error": error.message}, headers)

    return Handler


class _EntryNotFound(HubError):
    def __init__(self, commit_oid: str, message: str):
        super().__init__(404, message, "EntryNotFound")
        self.commit_oid = commit_oid


def _split_revision(repo: Repo, parts: list[str]) -> tuple[str, str]:
    """`tree/{rev}/{path}`: the revision is URL-quoted by the client, but accept `refs/pr/1` unquoted too."""
    for cut in range(len(parts), 0, -1):
        candidate = "/".join(parts[:cut])
        if repo.resolve(candidate) is not None:
            return candidate, "/".join(parts[cut:])
    return parts[0], "/".join(parts[1:])
