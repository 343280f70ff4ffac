"""Which scaled-dot-product attention backends the model lets PyTorch use (VaswaniConfig.sdpa_backends).

On a CUDA GPU the default leaves out cuDNN attention (an execution plan per new shape on Hopper); on the CPU no
`sdpa_kernel` context is entered at all, so the CPU path is the one it was. Checked on the CPU: the choice for a
CUDA device is a pure function of the config and the device, and the context is observed by replacing
`sdpa_kernel` in the model's module. The GPU check at the end runs only where CUDA is.
"""

import contextlib

import pytest
import torch
from torch.nn.attention import SDPBackend

import hf_vaswani.modeling_vaswani as modeling
from hf_vaswani.configuration_vaswani import SDPA_BACKEND_NAMES
from tests.conftest import tiny_config, tiny_model

CUDA = torch.device("cuda")  # a device object only: nothing runs on it here
CPU = torch.device("cpu")


def batch(padded: bool = True):
    torch.manual_seed(0)
    input_ids = torch.randint(4, 64, (3, 7))
    attention_mask = torch.ones_like(input_ids)
    if padded:
        attention_mask[0, 5:] = 0
        input_ids[0, 5:] = 1
    decoder_input_ids = torch.randint(4, 64, (3, 5))
    return dict(input_ids=input_ids, attention_mask=attention_mask, decoder_input_ids=decoder_input_ids)


def sdpa_model(**overrides):
    model = tiny_model(**overrides)
    model.set_attn_implementation("sdpa")
    return model


@pytest.fixture
def recorded(monkeypatch):
    """Replace the model module's sdpa_kernel by one that records the backends it was entered with."""
    entered = []

    @contextlib.contextmanager
    def recording_sdpa_kernel(backends, set_priority=False):
        entered.append(list(backends))
        yield

    monkeypatch.setattr(modeling, "sdpa_kernel", recording_sdpa_kernel)
    return entered


def test_default_on_cuda_excludes_cudnn():
    config = tiny_config()
    config._attn_implementation = "sdpa"
    backends = modeling.sdpa_backends_for(config, CUDA)
    assert SDPBackend.CUDNN_ATTENTION not in backends
    assert backends == [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]


def test_user_choice_on_cuda():
    config = tiny_config(sdpa_backends=["cudnn", "flash"])
    config._attn_implementation = "sdpa"
    assert modeling.sdpa_backends_for(config, CUDA) == [SDPBackend.CUDNN_ATTENTION, SDPBackend.FLASH_ATTENTION]
    config.sdpa_backends = None  # PyTorch's own choice, cuDNN included
    assert modeling.sdpa_backends_for(config, CUDA) is None


def test_no_choice_on_cpu_or_other_implementations():
    config = tiny_config()
    config._attn_implementation = "sdpa"
    assert modeling.sdpa_backends_for(config, CPU) is None
    config._attn_implementation = "eager"
    assert modeling.sdpa_backends_for(config, CUDA) is None


def test_names_match_torch():
    assert set(modeling.SDPA_BACKENDS) == set(SDPA_BACKEND_NAMES)
    for name, backend in modeling.SDPA_BACKENDS.items():  # torch's own table: name -> enum member
        assert torch.nn.attention._backend_names[name] == backend.name


def test_unknown_name_refused():
    with pytest.raises(ValueError, match="sdpa_backends"):
        tiny_config(sdpa_backends=["cudnn_attention"])
    with pytest.raises(ValueError, match="sdpa_backends"):
        tiny_config(sdpa_backends=[])


def test_saved_choice_round_trips(tmp_path):
    config = tiny_config(sdpa_backends=None)
    config.save_pretrained(tmp_path)
    assert type(config).from_pretrained(tmp_path).sdpa_backends is None
    config = tiny_config(sdpa_backends=["cudnn"])
    config.save_pretrained(tmp_path)
    assert type(config).from_pretrained(tmp_path).sdpa_backends == ["cudnn"]


def test_cpu_forward_enters_no_context(recorded):
    model = sdpa_model()
    with torch.no_grad():
        model(**batch())
        model.generate(batch()["input_ids"], max_new_tokens=3)
    assert recorded == []


def test_every_attention_enters_the_choice_on_cuda(recorded, monkeypatch):
    """With the CPU counted as a CUDA-like device, each attention call (encoder self, decoder self, cross) enters
    sdpa_kernel with the config's backends, and the outputs equal those without it."""
    model = sdpa_model()
    with torch.no_grad():
        expected = model(**batch()).logits
    monkeypatch.setattr(modeling, "SDPA_BACKEND_DEVICES", ("cuda", "cpu"))
    with torch.no_grad():
        logits = model(**batch()).logits
    layers = model.config.encoder_layers + 2 * model.config.decoder_layers
    assert len(recorded) == layers
    assert all(SDPBackend.CUDNN_ATTENTION not in backends for backends in recorded)
    torch.testing.assert_close(logits, expected, rtol=0, atol=0)

    recorded.clear()
    model.config.sdpa_backends = ["cudnn", "flash", "mem_efficient", "math"]
    with torch.no_grad():
        model(**batch())
    assert recorded and all(SDPBackend.CUDNN_ATTENTION in backends for backends in recorded)


@pytest.mark.slow
def test_context_compiles_without_graph_breaks(monkeypatch):
    """The real sdpa_kernel inside a compiled forward (dynamo traces it as SDPAKernelVariable): one graph, no
    break, and the same logits as eager. Forced onto the CPU, where flash (CPU) and math are the backends."""
    monkeypatch.setattr(modeling, "SDPA_BACKEND_DEVICES", ("cuda", "cpu"))
    model = sdpa_model()
    inputs = batch()
    with torch.no_grad():
        expected = model(**inputs).logits
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    compiled = torch.compile(model, backend="eager", fullgraph=True)
    with torch.no_grad():
        logits = compiled(**inputs).logits
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == 1
    assert not torch._dynamo.utils.counters["graph_break"]
    torch.testing.assert_close(logits, expected)
    # The global flags are restored after the call: cuDNN attention is enabled again outside the model.
    assert torch.backends.cuda.cudnn_sdp_enabled()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_on_gpu_no_cudnn_kernel_runs():
    """On a GPU: the kernels that ran, by attention kind, contain no cuDNN attention (the device check)."""
    from torch.profiler import ProfilerActivity, profile

    dtype = torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    model = sdpa_model().to("cuda", dtype)
    inputs = {key: value.cuda() for key, value in batch().items()}
    with torch.no_grad(), profile(activities=[ProfilerActivity.CUDA, ProfilerActivity.CPU]) as profiler:
        model(**inputs)
        torch.cuda.synchronize()
    names = [event.key for event in profiler.key_averages()]
    print("\n".join(name for name in names if "attention" in name.lower() or "fmha" in name.lower()))
    assert not [name for name in names if "cudnn" in name.lower() and "attention" in name.lower()]
    assert any("efficient_attention" in name for name in names)  # the padded encoder and cross-attention
    assert any("flash_attention" in name for name in names)  # the causal decoder self-attention, no mask
