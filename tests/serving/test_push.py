"""`python -m training.push` and the Trainer's `--push_to_hub`, against the local Hub stand-in (tests/hub_stub.py).

A tiny model is trained once; it is pushed in a subprocess whose HF_ENDPOINT is the stub, and downloaded again in
a fresh process with an empty HF_HOME where hf_vaswani cannot be imported: what comes back must generate the same
tokens as the folder training wrote.
"""

import json
import subprocess
import sys
import textwrap

import pytest
import torch

from hf_vaswani_training import cli
from hf_vaswani_training.recipe.train import main
from hf_vaswani_training.serving.push import ModelFolderError, files_to_push, validate_model_folder
from hf_vaswani_training.usage import UsageError
from tests.conftest import REPO_ROOT, TINY
from tests.hub_stub import HubStub, hub_env, hub_stub  # noqa: F401  (hub_stub is a fixture)

SENTENCES = ["The dog sees a small house .", "Here I am rich under her soft box .", "The pig sings ."]
MODEL_FILES = {
    "README.md",
    "config.json",
    "configuration_vaswani.py",
    "generation_config.json",
    "generation_vaswani.py",
    "row_dropping_vaswani.py",
    "compat_vaswani.py",
    "model.safetensors",
    "modeling_vaswani.py",
    "pipeline_vaswani.py",
    "results.json",
    "tokenizer.json",
    "tokenizer_config.json",
}
RUN_ARGS = ["--max_steps", "6", "--average_last_n", "2", "--toy_num_validation", "4", "--toy_num_test", "4"]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    """A finished tiny run: model files plus checkpoints/ (checkpoint-3/, checkpoint-6/, .averaged/) and (added)
    Trainer leftovers."""
    output_dir = tmp_path_factory.mktemp("push") / "tiny-vaswani"
    main([*TINY, "--output_dir", str(output_dir), *RUN_ARGS])
    checkpoints = output_dir / "checkpoints"
    assert (checkpoints / "checkpoint-6" / "optimizer.pt").is_file() and (checkpoints / ".averaged").is_dir()
    # What a run with TensorBoard and the Trainer's own Hub pushes leaves next to the model.
    (output_dir / "runs" / "Nov21_run").mkdir(parents=True)
    (output_dir / "runs" / "Nov21_run" / "events.out.tfevents.1.vm").write_bytes(b"\0" * 16)
    (output_dir / "training_args.bin").write_bytes(b"pickle")
    return output_dir


def _run(args: list[str], env: dict, cwd=REPO_ROOT, timeout: int = 300) -> subprocess.CompletedProcess:
    completed = subprocess.run(
        args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL
    )
    assert completed.returncode == 0, completed.stdout[-3000:] + completed.stderr[-3000:]
    return completed


# Run in this process and in the download process, so that both compute exactly the same things: the token ids of
# the paper's decoding (generation_config.json: beam 4, GNMT penalty), of seeded sampling (a tiny model's beam output
# is short, sampling makes the comparison non-trivial) and the logits of one forward pass.
_TRANSLATE = textwrap.dedent(
    """
    def translate(model, tokenizer, sentences):
        import torch

        batch = tokenizer(sentences, return_tensors="pt", padding=True)
        with torch.no_grad():
            paper = model.generate(**batch)
            torch.manual_seed(0)
            sampled = model.generate(
                **batch, do_sample=True, num_beams=1, top_k=0, min_new_tokens=5, max_new_tokens=8
            )
            decoder_input_ids = torch.tensor([[0, 5, 9, 14, 20]] * len(sentences))
            logits = model(**batch, decoder_input_ids=decoder_input_ids).logits
        return {
            "input_ids": batch["input_ids"].tolist(),
            "paper": paper.tolist(),
            "sampled": sampled.tolist(),
            "logits": logits.tolist(),
        }
    """
)


def _translate(model, tokenizer) -> dict:
    namespace: dict = {}
    exec(_TRANSLATE, namespace)
    return namespace["translate"](model, tokenizer, SENTENCES)


# ---- validation (no network) ----------------------------------------------------------------------------------------


def test_only_the_model_files_are_pushed(model_dir, capsys):
    from hf_vaswani_training.serving.push import main as push_main

    assert set(files_to_push(model_dir)) == MODEL_FILES
    assert push_main([str(model_dir), "user/x", "--dry-run"]) is None
    listed = {line.strip() for line in capsys.readouterr().out.splitlines()[1:]}
    assert listed == MODEL_FILES


def test_a_folder_that_is_not_a_model_is_a_clear_error(model_dir, tmp_path):
    from hf_vaswani_training.serving.push import main as push_main

    with pytest.raises(ModelFolderError, match=f"{tmp_path} is not a model folder: it has no config.json"):
        validate_model_folder(tmp_path)
    with pytest.raises(UsageError, match=f"{tmp_path / 'missing'} is not a folder"):
        push_main([str(tmp_path / "missing"), "user/x", "--dry-run"])

    copy = tmp_path / "copy"
    copy.mkdir()
    for name in MODEL_FILES - {"README.md"}:
        (copy / name).write_bytes((model_dir / name).read_bytes())
    with pytest.raises(ModelFolderError, match=f"{copy} has no model card README.md"):
        validate_model_folder(copy, load=False)
    (copy / "README.md").write_text("---\nlanguage: [en\n---\n# card\n")
    with pytest.raises(ModelFolderError, match="YAML metadata does not parse"):
        validate_model_folder(copy, load=False)
    (copy / "README.md").write_bytes((model_dir / "README.md").read_bytes())
    (copy / "modeling_vaswani.py").unlink()
    with pytest.raises(ModelFolderError, match="modeling_vaswani.py is missing"):
        validate_model_folder(copy, load=False)


def test_a_foreign_tokenizer_is_named_before_the_weights_load(model_dir, tmp_path, monkeypatch, capsys):
    """Same size, other ids (two tokens' ids swapped): config.json's tokenizer fingerprint names it in one line from
    the files alone; loading the weights (or the tokenizer) would fail the test."""
    import transformers

    from hf_vaswani_training.serving import push

    copy = tmp_path / "copy"
    copy.mkdir()
    for name in MODEL_FILES:
        (copy / name).write_bytes((model_dir / name).read_bytes())
    assert "tokenizer_fingerprint" in json.loads((copy / "config.json").read_text())
    tokenizer_json = json.loads((copy / "tokenizer.json").read_text(encoding="utf-8"))
    vocab = tokenizer_json["model"]["vocab"]
    first, second = sorted(vocab, key=vocab.get)[10:12]
    vocab[first], vocab[second] = vocab[second], vocab[first]
    (copy / "tokenizer.json").write_text(json.dumps(tokenizer_json), encoding="utf-8")

    def heavy(*args, **kwargs):
        raise AssertionError("weights loaded before the tokenizer files were checked")

    monkeypatch.setattr(transformers.AutoModelForSeq2SeqLM, "from_pretrained", heavy)
    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", heavy)
    monkeypatch.setattr(push, "weights_shape_problem", heavy)
    with pytest.raises(ModelFolderError) as caught:
        validate_model_folder(copy)
    message = str(caught.value)
    assert "\n" not in message and message.startswith(
        f"{copy / 'tokenizer.json'} is another tokenizer than the model's"
    )
    code = cli.push([str(copy), "user/x", "--dry-run"])
    stderr = capsys.readouterr().err
    assert code == 2 and len(stderr.strip().splitlines()) == 1 and "is another tokenizer" in stderr, stderr
    (copy / "config.json").write_text('{"vocab_size": 64,', encoding="utf-8")  # cut short
    with pytest.raises(ModelFolderError, match="config.json: not a readable JSON config"):
        validate_model_folder(copy)


def test_verbose_is_an_option_and_brings_back_library_info(tmp_path, capsys):
    import logging

    from hf_vaswani_training.serving.push import main as push_main

    with pytest.raises(SystemExit):
        push_main(["--help"])
    assert "--verbose" in capsys.readouterr().out
    for flags, level in ((["--verbose"], logging.INFO), ([], logging.WARNING)):  # quiet again at the end
        with pytest.raises(ModelFolderError):  # after the logs are set up
            push_main([str(tmp_path / "missing"), "user/x", "--dry-run", *flags])
        assert logging.getLogger("transformers").level == level


# ---- push and load back ---------------------------------------------------------------------------------------------

_REMOTE_SCRIPT = (
    textwrap.dedent(
        """
        import sys
        sys.modules["hf_vaswani"] = None  # as on a machine where the package was never installed
        try:
            import hf_vaswani  # noqa: F401
        except ImportError:
            pass
        else:
            raise SystemExit("hf_vaswani is importable in the download process")

        import json
        import torch
        from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

        torch.set_num_threads(1)
        """
    )
    + _TRANSLATE
    + textwrap.dedent(
        """
        repo_id, sentences = sys.argv[1], json.loads(sys.argv[2])
        model = AutoModelForSeq2SeqLM.from_pretrained(repo_id, trust_remote_code=True).eval()
        tokenizer = AutoTokenizer.from_pretrained(repo_id, trust_remote_code=True)  # as the model card says
        plain_tokenizer = AutoTokenizer.from_pretrained(repo_id)  # no trust_remote_code: the same tokenizer
        result = translate(model, tokenizer, sentences)
        result["plain_tokenizer_ids"] = plain_tokenizer(sentences, padding=True)["input_ids"]
        result["module"] = type(model).__module__
        result["source"] = sys.modules[type(model).__module__].__file__
        print("\\nRESULT", json.dumps(result))  # on a line of its own: the plain tokenizer printed a y/N prompt
        """
    )
)


def test_push_then_load_from_the_hub_in_a_fresh_process(model_dir, hub_stub, tmp_path):  # noqa: F811
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    repo_id = "user/tiny-vaswani"
    push = _run(
        [sys.executable, "-m", "hf_vaswani_training.push", str(model_dir), repo_id, "--commit-message", "First model"],
        hub_env(hub_stub.url, tmp_path / "push_home"),
    )
    assert push.stdout.strip().splitlines()[-1] == f"{hub_stub.url}/{repo_id}"

    # What the Hub received: the model files as training wrote them, and nothing from the training state.
    files = hub_stub.files(repo_id)
    assert set(files) == MODEL_FILES | {".gitattributes"}, hub_stub.describe_requests()
    for name in MODEL_FILES:
        assert files[name] == (model_dir / name).read_bytes(), name
    assert files["README.md"].startswith(b"---\nlibrary_name: transformers\n")
    assert b"# tiny-vaswani: a Transformer (Vaswani et al., 2017)" in files["README.md"]
    assert not [name for name in files if name.startswith(("checkpoint", ".averaged", "runs/", "training_args"))]
    assert json.loads(files["config.json"])["auto_map"]["AutoModelForSeq2SeqLM"].startswith("modeling_vaswani.")
    commits = hub_stub.history(repo_id)
    assert [commit.message for commit in commits] == ["First model", "initial commit"]
    assert "test sacreBLEU" in commits[0].description
    assert not hub_stub.unhandled

    # A fresh process, an empty cache, no hf_vaswani: everything comes from the stub Hub.
    home = tmp_path / "download_home"
    workdir = tmp_path / "elsewhere"
    workdir.mkdir()
    hub_stub.requests.clear()
    completed = _run(
        [sys.executable, "-c", _REMOTE_SCRIPT, repo_id, json.dumps(SENTENCES)],
        hub_env(hub_stub.url, home),
        cwd=workdir,
    )
    remote = json.loads(completed.stdout.rsplit("\nRESULT ", 1)[1])
    assert remote["module"].startswith("transformers_modules.") and "hf_vaswani" not in remote["module"]
    assert remote["source"].startswith(str(home / "modules"))
    assert (home / "hub" / "models--user--tiny-vaswani").is_dir()
    downloaded = {
        path.split("/resolve/", 1)[1].split("/", 1)[1]
        for method, path, _ in hub_stub.requests
        if method == "GET" and "/resolve/" in path
    }
    assert {"config.json", "model.safetensors", "modeling_vaswani.py", "configuration_vaswani.py"} <= downloaded
    assert {"generation_config.json", "tokenizer.json"} <= downloaded

    # The same tokens as the folder training wrote, loaded here with the package's own classes.
    model = AutoModelForSeq2SeqLM.from_pretrained(model_dir).eval()
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    local = _translate(model, tokenizer)
    assert remote["input_ids"] == local["input_ids"] == remote["plain_tokenizer_ids"]
    assert remote["paper"] == local["paper"]
    assert remote["sampled"] == local["sampled"]
    assert len({token for row in local["sampled"] for token in row[1:]}) > 3  # not a trivial output
    torch.testing.assert_close(torch.tensor(remote["logits"]), torch.tensor(local["logits"]), rtol=0, atol=1e-6)


def test_push_to_a_private_branch_and_as_a_pull_request(model_dir, hub_stub, tmp_path):  # noqa: F811
    repo_id = "user/tiny-branches"
    script = (
        "from hf_vaswani_training.serving.push import main\n"
        f"main([{str(model_dir)!r}, {repo_id!r}, '--private', '--branch', 'dev'])\n"
        f"main([{str(model_dir)!r}, {repo_id!r}, '--create-pr', '--commit-message', 'Please merge'])\n"
    )
    completed = _run([sys.executable, "-c", script], hub_env(hub_stub.url, tmp_path / "home"))
    lines = completed.stdout.strip().splitlines()
    assert f"{hub_stub.url}/{repo_id}/tree/dev" in lines
    assert f"pull request: {hub_stub.url}/{repo_id}/discussions/1" in lines

    assert hub_stub.repos[repo_id].private
    assert set(hub_stub.files(repo_id, "main")) == {".gitattributes"}  # the branch push left main alone
    assert set(hub_stub.files(repo_id, "dev")) == MODEL_FILES | {".gitattributes"}
    assert set(hub_stub.files(repo_id, "refs/pr/1")) == MODEL_FILES | {".gitattributes"}
    assert hub_stub.history(repo_id, "refs/pr/1")[0].message == "Please merge"

    # Private: without a token the repo does not exist.
    anonymous = subprocess.run(
        [sys.executable, "-c", f"from huggingface_hub import HfApi; HfApi().model_info({repo_id!r})"],
        env=hub_env(hub_stub.url, tmp_path / "anonymous", token=None),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert anonymous.returncode != 0 and "RepositoryNotFoundError" in anonymous.stderr


# ---- the Trainer's own push -----------------------------------------------------------------------------------------


def test_train_with_push_to_hub_leaves_the_final_model_and_card_on_the_hub(hub_stub, tmp_path):  # noqa: F811
    repo_id = "user/trainer-push"
    output_dir = tmp_path / "trainer-push"
    args = [*TINY, "--output_dir", str(output_dir), *RUN_ARGS, "--push_to_hub", "True", "--hub_model_id", repo_id]
    _run(
        [sys.executable, "-m", "hf_vaswani_training.train", *args],
        hub_env(hub_stub.url, tmp_path / "home"),
        timeout=600,
    )
    assert (output_dir / "README.md").is_file()

    files = hub_stub.files(repo_id)
    # The final model is the averaged one that training evaluated and described in the card, not the last step's.
    assert files.get("model.safetensors") == (output_dir / "model.safetensors").read_bytes()
    assert json.loads(files["config.json"])["auto_map"]["AutoModelForSeq2SeqLM"].startswith("modeling_vaswani.")
    for name in ("configuration_vaswani.py", "modeling_vaswani.py", "generation_config.json", "tokenizer.json"):
        assert files.get(name) == (output_dir / name).read_bytes(), name
    assert files.get("README.md") == (output_dir / "README.md").read_bytes()
    assert not [name for name in files if name.startswith(("checkpoint", ".averaged", "runs/"))]


def test_the_stub_refuses_what_the_hub_refuses(tmp_path):
    """The stand-in is only useful if it fails where the Hub fails: missing files, bad card metadata, no token."""
    script = textwrap.dedent(
        """
        import sys
        from huggingface_hub import HfApi, hf_hub_download
        from huggingface_hub.errors import EntryNotFoundError, HfHubHTTPError, RepositoryNotFoundError

        api = HfApi()
        api.create_repo("user/r")
        api.upload_file(path_or_fileobj=b"---\\nlicense: mit\\n---\\n# ok\\n", path_in_repo="README.md", repo_id="user/r")
        assert open(hf_hub_download("user/r", "README.md")).read().endswith("# ok\\n")
        try:
            hf_hub_download("user/r", "missing.json")
        except EntryNotFoundError:
            print("missing file: EntryNotFound")
        try:
            api.upload_file(path_or_fileobj=b"---\\nlanguage: [en\\n---\\n", path_in_repo="README.md", repo_id="user/r")
        except ValueError as error:
            print("bad card:", "Invalid metadata in README.md" in str(error))
        try:
            api.model_info("user/other")
        except RepositoryNotFoundError:
            print("missing repo: RepositoryNotFound")
        try:
            HfApi(token=False).create_repo("user/anonymous")
        except HfHubHTTPError as error:
            print("no token:", error.response.status_code)
        """
    )
    with HubStub() as stub:
        completed = _run([sys.executable, "-c", script], hub_env(stub.url, tmp_path / "home"), timeout=120)
        assert stub.unhandled == []
    assert completed.stdout.splitlines() == [
        "missing file: EntryNotFound",
        "bad card: True",
        "missing repo: RepositoryNotFound",
        "no token: 401",
    ]
