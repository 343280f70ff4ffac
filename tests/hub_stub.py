"""A local stand-in for the Hugging Face Hub, so Hub code paths are tested without the network (the project's style
guide, §15).

`HubStub` is a threaded HTTP server on 127.0.0.1 (a free port) that speaks just enough of the Hub API for
`huggingface_hub` 2.x, `transformers` and `datasets` to create a model or dataset repo, commit files
(`upload_folder`, `create_commit`, `push_to_hub`, the Trainer's `push_to_hub`, `DatasetDict.push_to_hub`), read repo
info and download files (`hf_hub_download`, `snapshot_download`, `from_pretrained`, `datasets.load_dataset` of a
parquet dataset whose README maps configurations to files). Files live in memory; every commit is a full snapshot.
Model and dataset repos are separate namespaces (`HubStub.repos`, `HubStub.dataset_repos`;
`files(..., repo_type="dataset")`). Files that the repo's .gitattributes sends to LFS (a new model repo's
`*.safetensors`, `*.bin`; a new dataset repo's `*.parquet`, `*.arrow`, ...) or over 10 MB go through git-LFS, as on
the Hub: uploaded by the LFS batch API, committed as `lfsFile`, listed with their `lfs` sha256, downloaded with
`X-Linked-Etag`/`X-Linked-Size`.

What it implements (checked against the installed `huggingface_hub/hf_api.py`, `_commit_api.py`,
`file_download.py`, `utils/_http.py` and `datasets/load.py`); {kind} is `models` or `datasets`:

    POST /api/repos/create                          {"name", "organization", "visibility"|"private", "type"}
    POST /api/validate-yaml                         {"content", "repoType"}: the README front matter must parse
    GET  /api/whoami-v2
    GET  /api/{kind}/{repo}[/revision/{rev}]        repo info with `sha` and `siblings` (and `cardData`)
    GET  /api/{kind}/{repo}/tree/{rev}[/{path}]     `list_repo_tree`, `HfFileSystem.ls` (one page, `?recursive=`)
    POST /api/{kind}/{repo}/paths-info/{rev}        `get_paths_info`
    GET  /api/{kind}/{repo}/refs                    `list_repo_refs`
    POST /api/{kind}/{repo}/branch/{branch}         `create_branch` (409 when it exists)
    POST /api/{kind}/{repo}/preupload/{rev}         `uploadMode` "lfs" or "regular", the stored file's oid
    POST /[datasets/]{repo}.git/info/lfs/objects/batch   LFS upload: `basic` upload + verify actions per new object
    PUT  /lfs-objects/{sha256}                      the upload action (the content must hash to the name)
    POST /lfs-verify                                the verify action
    POST /api/{kind}/{repo}/commit/{rev}            the NDJSON body: header, `file` (base64), `lfsFile` (an uploaded
                                                    object), deletions; `?create_pr=1` commits to a new `refs/pr/N`
    HEAD/GET /{repo}/resolve/{rev}/{path}           (a model's; a dataset's under /datasets/{repo}/resolve/...)
                                                    `X-Repo-Commit`, `ETag` (git blob sha1; an LFS file's sha256,
                                                    also in `X-Linked-Etag`, with `X-Linked-Size`), `Content-Length`;
                                                    404 with `X-Error-Code: RepoNotFound | RevisionNotFound |
                                                    EntryNotFound`. The Hub redirects an LFS file to its CDN; the
                                                    stub serves it directly.

Anything else is answered 501 and recorded in `HubStub.unhandled` (and logged as a warning), so a client that
starts needing a new endpoint fails with a message naming it. Writes need an `Authorization: Bearer` header;
private repos are invisible (404 RepoNotFound) without one. There is no Xet: clients must run with
`HF_HUB_DISABLE_XET=1` (see `hub_env`), which makes them use LFS. The dataset viewer (`datasets-server.{host}`,
which `datasets` asks for exported parquet files and infos) is not served; `datasets` takes that as "no export yet".

`huggingface_hub` reads `HF_ENDPOINT` when it is imported, so Hub round trips run in subprocesses whose
environment comes from `hub_env(stub.url, hf_home)`. Use the `hub_stub` fixture (import it into a test module):

    from tests.hub_stub import hub_env, hub_stub  # noqa: F401  (hub_stub is a fixture)

    def test_push(hub_stub, tmp_path):
        env = hub_env(hub_stub.url, tmp_path / "hf_home")
        subprocess.run([...], env=env, check=True)
        assert "README.md" in hub_stub.files("user/model")
"""

from __future__ import annotations

import base64
import fnmatch
import hashlib
import json
import logging
import os
import re
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from http.server import ThreadingHTTPServer
from pathlib import Path

import pytest

logger = logging.getLogger(__name__)

STUB_USER = "user"
STUB_TOKEN = "hf_stub_dummy_token"
GITATTRIBUTES = b"*.safetensors filter=lfs diff=lfs merge=lfs -text\n*.bin filter=lfs diff=lfs merge=lfs -text\n"
# What the Hub's .gitattributes of a new dataset repo sends to LFS (part of it: the formats datasets are shipped in).
DATASET_GITATTRIBUTES = b"".join(
    f"*.{ext} filter=lfs diff=lfs merge=lfs -text\n".encode() for ext in ("arrow", "parquet", "bin", "gz", "zst")
)
LFS_SPEC = "https://git-lfs.github.com/spec/v1"


def git_blob_sha1(content: bytes) -> str:
    """The git object id of a blob, which the Hub uses as a regular file's oid and ETag."""
    return hashlib.sha1(b"blob %d\0" % len(content) + content).hexdigest()


def lfs_pointer(content: bytes) -> bytes:
    """The git-LFS pointer file that git stores in place of an LFS file's content."""
    return f"version {LFS_SPEC}\noid sha256:{hashlib.sha256(content).hexdigest()}\nsize {len(content)}\n".encode()


def lfs_patterns(gitattributes: bytes) -> list[str]:
    """The patterns that a .gitattributes file sends to LFS (`PATTERN filter=lfs ...` lines)."""
    patterns = []
    for line in gitattributes.decode("utf-8", errors="replace").splitlines():
        fields = line.split()
        if len(fields) >= 2 and not fields[0].startswith("#") and "filter=lfs" in fields[1:]:
            patterns.append(fields[0])
    return patterns


def matches_lfs(path: str, patterns: list[str]) -> bool:
    """git's rule, simplified: a pattern without a slash matches the file name in any folder, one with a slash the
    whole path."""
    name = path.rsplit("/", 1)[-1]
    return any(fnmatch.fnmatchcase(path if "/" in pattern else name, pattern.lstrip("/")) for pattern in patterns)


def hub_env(endpoint: str, hf_home: str | os.PathLike, token: str | None = STUB_TOKEN) -> dict[str, str]:
    """The environment of a subprocess that talks to the stub at `endpoint` and caches in `hf_home` only."""
    hf_home = Path(hf_home)
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("HF_", "HUGGING_FACE_", "HUGGINGFACE_"))
        and key not in ("PYTHONPATH", "TRANSFORMERS_CACHE", "TRANSFORMERS_OFFLINE")
    }
    env.update(
        HF_ENDPOINT=endpoint,
        HF_HOME=str(hf_home),
        HF_MODULES_CACHE=str(hf_home / "modules"),
        HF_HUB_DISABLE_TELEMETRY="1",
        HF_HUB_DISABLE_XET="1",  # the stub speaks no Xet: uploads and downloads go through plain HTTP
        HF_HUB_DISABLE_PROGRESS_BARS="1",
        HF_DATASETS_DISABLE_PROGRESS_BARS="1",
        HF_HUB_DISABLE_UPDATE_CHECK="1",
        HF_HUB_DISABLE_IMPLICIT_TOKEN="1" if token is None else "0",
        OMP_NUM_THREADS="1",
        TOKENIZERS_PARALLELISM="false",
        NO_PROXY="127.0.0.1,localhost",
        no_proxy="127.0.0.1,localhost",
    )
    if token is not None:
        env["HF_TOKEN"] = token
    return env


# ---- storage --------------------------------------------------------------------------------------------------------


@dataclass
class Commit:
    oid: str
    parent: str | None
    message: str
    description: str
    files: dict[str, bytes]
    date: str
    lfs: frozenset[str] = frozenset()  # the paths stored in LFS: the repo holds a pointer, the content is an object

    def entry(self, path: str) -> dict:
        """The file's entry in tree listings and paths-info: for an LFS file, the pointer's oid plus `lfs`."""
        content = self.files[path]
        if path not in self.lfs:
            return {"type": "file", "oid": git_blob_sha1(content), "size": len(content), "path": path}
        pointer = lfs_pointer(content)
        lfs = {"oid": hashlib.sha256(content).hexdigest(), "size": len(content), "pointerSize": len(pointer)}
        return {"type": "file", "oid": git_blob_sha1(pointer), "size": len(content), "path": path, "lfs": lfs}


@dataclass
class Repo:
    repo_id: str
    private: bool
    repo_type: str = "model"  # "model" or "dataset": separate namespaces, as on the Hub
    commits: dict[str, Commit] = field(default_factory=dict)
    refs: dict[str, str] = field(default_factory=dict)  # "main", "dev", "refs/pr/1" -> commit oid
    pull_requests: list[str] = field(default_factory=list)  # the target branch of PR number i + 1

    def resolve(self, revision: str) -> Commit | None:
        if revision in self.refs:
            return self.commits[self.refs[revision]]
        matches = [oid for oid in self.commits if len(revision) >= 7 and oid.startswith(revision)]
        return self.commits[matches[0]] if len(matches) == 1 else None


class HubError(Exception):
    def __init__(self, status: int, message: str, error_code: str | None = None):
        super().__init__(message)
        self.status, self.message, self.error_code = status, message, error_code


# ---- the server -----------------------------------------------------------------------------------------------------


class HubStub:
    """The in-memory Hub. `start()`/`stop()` or use it as a context manager; `url` is its `HF_ENDPOINT`."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0):
        if host not in ("127.0.0.1", "localhost", "::1"):
            raise ValueError(f"host={host!r}: the stub only listens on the loopback interface")
        self.repos: dict[str, Repo] = {}  # model repos
        self.dataset_repos: dict[str, Repo] = {}
        self.lfs_objects: dict[str, bytes] = {}  # sha256 -> content, uploaded through the LFS batch API
        self.requests: list[tuple[str, str, int]] = []  # (method, path, status) of every request
        self.unhandled: list[str] = []
        self._lock = threading.RLock()
        from tests.hub_stub_http import make_handler  # the HTTP layer; it imports this module's repo model

        self._server = ThreadingHTTPServer((host, port), make_handler(self))
        self._server.daemon_threads = True
        self._thread: threading.Thread | None = None
        self.url = f"http://{host}:{self._server.server_address[1]}"

    # -- lifecycle --
    def start(self) -> HubStub:
        self._thread = threading.Thread(target=self._server.serve_forever, name="hub-stub", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def __enter__(self) -> HubStub:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def store(self, repo_type: str = "model") -> dict[str, Repo]:
        """The repos of one type: `repos` (models) or `dataset_repos`."""
        if repo_type == "model":
            return self.repos
        if repo_type == "dataset":
            return self.dataset_repos
        raise HubError(400, f"hub_stub: only model and dataset repos are supported, not {repo_type!r}")

    # -- inspection, for tests --
    def files(self, repo_id: str, revision: str = "main", repo_type: str = "model") -> dict[str, bytes]:
        """The files of `repo_id` at `revision` (a branch, `refs/pr/N` or a commit oid)."""
        with self._lock:
            repo = self.store(repo_type)[repo_id]
            commit = repo.resolve(revision)
            if commit is None:
                raise KeyError(f"{repo_id} has no revision {revision!r} (refs: {sorted(repo.refs)})")
            return dict(commit.files)

    def history(self, repo_id: str, revision: str = "main", repo_type: str = "model") -> list[Commit]:
        """The commits of `revision`, newest first."""
        with self._lock:
            repo = self.store(repo_type)[repo_id]
            commit, commits = repo.resolve(revision), []
            while commit is not None:
                commits.append(commit)
                commit = repo.commits.get(commit.parent) if commit.parent else None
            return commits

    def describe_requests(self) -> str:
        return "\n".join(f"{method} {path} -> {status}" for method, path, status in self.requests)

    # -- the API --
    def _repo(self, repo_id: str, authorized: bool, repo_type: str = "model") -> Repo:
        repo = self.store(repo_type).get(repo_id)
        if repo is None or (repo.private and not authorized):
            raise HubError(404, f"Repository {repo_id} not found", "RepoNotFound")
        return repo

    def _commit(self, repo: Repo, revision: str) -> Commit:
        commit = repo.resolve(revision)
        if commit is None:
            raise HubError(404, f"Invalid rev id: {revision}", "RevisionNotFound")
        return commit

    def _new_commit(
        self,
        repo: Repo,
        parent: Commit | None,
        files: dict[str, bytes],
        message: str,
        description: str = "",
        lfs: frozenset[str] = frozenset(),
    ) -> Commit:
        stamp = f"{repo.repo_id}\n{parent.oid if parent else ''}\n{message}\n{time.time_ns()}\n"
        digest = hashlib.sha1(stamp.encode())
        for path in sorted(files):
            digest.update(path.encode() + b"\0" + git_blob_sha1(files[path]).encode())
        commit = Commit(
            oid=digest.hexdigest(),
            parent=parent.oid if parent else None,
            message=message,
            description=description,
            files=files,
            date=datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.000Z"),
            lfs=frozenset(lfs),
        )
        repo.commits[commit.oid] = commit
        return commit

    def create_repo(self, payload: dict) -> tuple[int, dict]:
        repo_type = payload.get("type") or "model"
        store = self.store(repo_type)
        name = payload["name"]
        namespace = payload.get("organization") or STUB_USER
        repo_id = f"{namespace}/{name}"
        url = self.repo_url(Repo(repo_id, False, repo_type))
        with self._lock:
            if repo_id in store:
                return 409, {"error": f"You already created this {repo_type} repo", "url": url}
            private = payload.get("private")
            if payload.get("visibility") is not None:
                private = payload["visibility"] != "public"
            repo = Repo(repo_id=repo_id, private=bool(private), repo_type=repo_type)
            gitattributes = GITATTRIBUTES if repo_type == "model" else DATASET_GITATTRIBUTES
            first = self._new_commit(repo, None, {".gitattributes": gitattributes}, "initial commit")
            repo.refs["main"] = first.oid
            store[repo_id] = repo
        return 200, {"url": url, "name": repo_id, "id": repo_id}

    def repo_url(self, repo: Repo) -> str:
        return f"{self.url}/{repo.repo_id}" if repo.repo_type == "model" else f"{self.url}/datasets/{repo.repo_id}"

    def repo_info(self, repo: Repo, revision: str | None) -> dict:
        commit = self._commit(repo, revision or "main")
        info = {
            "_id": hashlib.sha1(repo.repo_id.encode()).hexdigest()[:24],
            "id": repo.repo_id,
            "author": repo.repo_id.split("/")[0],
            "sha": commit.oid,
            "lastModified": commit.date,
            "createdAt": repo.commits[next(iter(repo.commits))].date,
            "private": repo.private,
            "disabled": False,
            "gated": False,
            "downloads": 0,
            "likes": 0,
            "tags": [],
            "siblings": [_sibling(commit.entry(path)) for path in sorted(commit.files)],
        }
        if repo.repo_type == "model":
            info["modelId"] = repo.repo_id
        card = _front_matter(commit.files.get("README.md", b"").decode("utf-8", errors="replace"))
        if isinstance(card, dict):
            info["cardData"] = card
            info["tags"] = list(card.get("tags") or [])
            for key in ("library_name", "pipeline_tag"):
                if card.get(key) and repo.repo_type == "model":
                    info[key] = card[key]
        config = commit.files.get("config.json")
        if config is not None and repo.repo_type == "model":
            try:
                info["config"] = {
                    key: value
                    for key, value in json.loads(config).items()
                    if key in ("architectures", "model_type", "auto_map")
                }
            except ValueError:
                pass
        return info

    def tree(self, repo: Repo, revision: str, path: str, recursive: bool) -> list[dict]:
        commit = self._commit(repo, revision)
        prefix = f"{path.strip('/')}/" if path.strip("/") else ""
        entries, folders = [], set()
        for file_path in sorted(commit.files):
            if not file_path.startswith(prefix):
                continue
            rest = file_path[len(prefix) :]
            if "/" in rest and not recursive:
                folders.add(prefix + rest.split("/")[0])
                continue
            if recursive:
                parts = rest.split("/")[:-1]
                folders.update(prefix + "/".join(parts[: i + 1]) for i in range(len(parts)))
            entries.append(commit.entry(file_path))
        if prefix and not entries and not folders:
            raise HubError(404, f"{path} does not exist on {revision}", "EntryNotFound")
        folder_entries = [
            {"type": "directory", "oid": hashlib.sha1(folder.encode()).hexdigest(), "size": 0, "path": folder}
            for folder in sorted(folders)
        ]
        return folder_entries + entries

    def upload_mode(self, commit: Commit | None, path: str, size: int) -> str:
        """ "lfs" for what the repo's .gitattributes sends to LFS or a file over 10 MB, as the Hub decides."""
        patterns = lfs_patterns(commit.files.get(".gitattributes", b"")) if commit is not None else []
        return "lfs" if size > _LFS_SIZE or matches_lfs(path, patterns) else "regular"

    def lfs_batch(self, payload: dict) -> dict:
        """The git-LFS batch API (upload): an upload and a verify action per object the stub does not hold yet."""
        if payload.get("operation") != "upload":
            raise HubError(400, f"hub_stub: only LFS uploads are supported, not {payload.get('operation')!r}")
        objects = []
        for obj in payload.get("objects", []):
            oid, size = obj["oid"], obj["size"]
            entry = {"oid": oid, "size": size, "authenticated": True}
            if oid not in self.lfs_objects:
                entry["actions"] = {
                    "upload": {"href": f"{self.url}/lfs-objects/{oid}", "header": {}},
                    "verify": {"href": f"{self.url}/lfs-verify"},
                }
            objects.append(entry)
        return {"transfer": "basic", "objects": objects, "hash_algo": "sha256"}

    def commit(self, repo: Repo, revision: str, body: bytes, create_pr: bool) -> dict:
        lines = [json.loads(line) for line in body.decode("utf-8").splitlines() if line.strip()]
        if not lines or lines[0].get("key") != "header":
            raise HubError(400, "hub_stub: the commit body must start with a header line")
        header = lines[0]["value"]
        with self._lock:
            base = self._commit(repo, revision)
            parent_oid = header.get("parentCommit")
            if parent_oid and not create_pr and not base.oid.startswith(parent_oid):
                raise HubError(412, f"hub_stub: {revision} is at {base.oid}, not at parentCommit {parent_oid}")
            files, lfs = dict(base.files), set(base.lfs)
            for line in lines[1:]:
                key, value = line.get("key"), line.get("value", {})
                if key == "file":
                    if value.get("encoding", "base64") != "base64":
                        raise HubError(400, f"hub_stub: unsupported encoding {value.get('encoding')!r}")
                    files[value["path"]] = base64.b64decode(value["content"])
                    lfs.discard(value["path"])
                elif key == "lfsFile":
                    if value.get("algo", "sha256") != "sha256":
                        raise HubError(400, f"hub_stub: unsupported LFS hash {value.get('algo')!r}")
                    content = self.lfs_objects.get(value.get("oid", ""))
                    if content is None:
                        raise HubError(400, f"hub_stub: LFS object {value.get('oid')} of {value['path']} not uploaded")
                    files[value["path"]] = content
                    lfs.add(value["path"])
                elif key == "deletedFile":
                    if files.pop(value["path"], None) is None:
                        raise HubError(404, f"A file with this name doesn't exist: {value['path']}", "EntryNotFound")
                elif key == "deletedFolder":
                    folder = value["path"].rstrip("/") + "/"
                    for path in [p for p in files if p.startswith(folder)]:
                        del files[path]
                else:
                    raise HubError(400, f"hub_stub: unsupported commit operation {key!r}")
            summary, description = header.get("summary", ""), header.get("description", "")
            commit = self._new_commit(repo, base, files, summary, description, frozenset(lfs & set(files)))
            commit_url = f"{self.repo_url(repo)}/commit/{commit.oid}"
            result = {"success": True, "commitOid": commit.oid, "commitUrl": commit_url}
            if create_pr:
                repo.pull_requests.append(revision)
                number = len(repo.pull_requests)
                repo.refs[f"refs/pr/{number}"] = commit.oid
                result["pullRequestUrl"] = f"{self.repo_url(repo)}/discussions/{number}"
            else:
                if revision not in repo.refs:
                    raise HubError(400, f"hub_stub: can only commit to a branch, not to {revision!r}")
                repo.refs[revision] = commit.oid
                result["pullRequestUrl"] = None
        return result


def _front_matter(text: str):
    """The YAML metadata block of a model card, parsed; None when there is none; raises yaml.YAMLError."""
    import yaml

    match = re.match(r"^---[ \t]*\r?\n(.*?)\r?\n---[ \t]*(\r?\n|$)", text, re.DOTALL)
    if match is None:
        return None
    return yaml.safe_load(match.group(1))


def validate_card_metadata(content: str) -> list[str]:
    """What the Hub's validate-yaml would refuse in a README: unparsable YAML and a malformed model-index."""
    import yaml

    try:
        metadata = _front_matter(content)
    except yaml.YAMLError as error:
        return [f"Invalid YAML in the metadata block: {error}"]
    if metadata is None:
        return []
    if not isinstance(metadata, dict):
        return ["The metadata block must be a YAML mapping"]
    errors = []
    for key in ("tags", "datasets", "language"):
        value = metadata.get(key)
        if value is not None and not (isinstance(value, str) or isinstance(value, list)):
            errors.append(f'"{key}" must be a string or a list of strings')
    for index, model in enumerate(metadata.get("model-index") or []):
        if not isinstance(model, dict) or not model.get("name"):
            errors.append(f'"model-index[{index}].name" is required')
            continue
        for r, result in enumerate(model.get("results") or []):
            where = f"model-index[{index}].results[{r}]"
            if not (result.get("task") or {}).get("type"):
                errors.append(f'"{where}.task.type" is required')
            if not {"type", "name"} <= set(result.get("dataset") or {}):
                errors.append(f'"{where}.dataset" needs "type" and "name"')
            for m, metric in enumerate(result.get("metrics") or []):
                if "type" not in metric or not isinstance(metric.get("value"), (int, float, str)):
                    errors.append(f'"{where}.metrics[{m}]" needs "type" and a scalar "value"')
    return errors


_LFS_SIZE = 10 * 1024 * 1024  # the Hub stores larger files in LFS whatever .gitattributes says


def _sibling(entry: dict) -> dict:
    """A `siblings` item of repo info from a tree entry."""
    sibling = {"rfilename": entry["path"], "size": entry["size"], "blobId": entry["oid"]}
    if "lfs" in entry:
        sibling["lfs"] = {
            "sha256": entry["lfs"]["oid"],
            "size": entry["size"],
            "pointerSize": entry["lfs"]["pointerSize"],
        }
    return sibling


@pytest.fixture
def hub_stub() -> Iterator[HubStub]:
    """A fresh stub Hub on 127.0.0.1 for one test; its `url` is the `HF_ENDPOINT` for subprocesses."""
    with HubStub() as stub:
        yield stub
        if stub.unhandled:
            logger.warning("hub_stub: unhandled requests:\n%s", "\n".join(stub.unhandled))


__all__ = ["HubStub", "STUB_TOKEN", "STUB_USER", "git_blob_sha1", "hub_env", "hub_stub", "validate_card_metadata"]
