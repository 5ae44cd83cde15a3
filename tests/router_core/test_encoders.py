"""Encoder kinds: agreement with torch MiniLM, the record a router artifact keeps, and
routing from an ONNX or static artifact in a process that never imports torch.

The exports are built once per machine under the cache dir ($TOLLGATE_CACHE_DIR, like the
embedding cache the other tests share); distilling the static model takes minutes there.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from click.testing import CliRunner

from router_core.artifact import load_meta, load_router, save_router
from router_core.encoders import encoder_for_router, known_kinds, make_encoder
from router_core.encoders.base import default_cache_dir
from router_core.encoders.exports import EXPORT_NAMES, ensure_export
from router_core.encoders.minilm import Encoder

PREFIX = " ".join(f"Example {i}: the answer to question {i} is B." for i in range(60))
DEFAULT_LAM = 0.5  # the gateway's default cost weight


@pytest.fixture(scope="session")
def exports():
    return {kind: ensure_export(kind, default_cache_dir()) for kind in EXPORT_NAMES}


@pytest.fixture(scope="module")
def texts(mbpp_table):
    prompts = [str(p) for p in mbpp_table.prompts[:80]]
    return [*prompts, PREFIX + "\nQ: What is the capital of France?", PREFIX + "\nQ: Sort a list."]


@pytest.fixture(scope="module")
def torch_vectors(texts):
    return Encoder(cache=False).encode(texts)


def _vectors(kind, texts):
    x = make_encoder(kind).encode(texts)
    np.testing.assert_allclose(np.linalg.norm(x, axis=1), 1.0, atol=1e-5)
    return x


def test_onnx_fp32_gives_minilm_vectors_including_the_truncated_end(exports, texts, torch_vectors):
    x = _vectors("minilm-onnx", texts)
    assert float(np.min(np.sum(x * torch_vectors, axis=1))) > 0.999
    assert float(x[-1] @ x[-2]) < 0.95  # left truncation kept the differing questions


def test_int8_vectors_route_like_minilm_under_the_packaged_router(exports, texts, torch_vectors):
    x = _vectors("minilm-onnx-int8", texts)
    cos = np.sum(x * torch_vectors, axis=1)
    assert float(np.median(cos)) > 0.99 and float(cos.min()) > 0.98  # measured 0.995, 0.992
    router = load_router()  # the packaged router (trained on int8 vectors since issue 15)
    lam = np.array([DEFAULT_LAM])
    same = router.route_batch(router.project(x), lam) == router.route_batch(
        router.project(torch_vectors), lam
    )
    assert float(same.mean()) >= 0.9  # measured 0.94 on these 82 prompts


def test_static_vectors_keep_minilm_neighbourhoods(exports, texts, torch_vectors):
    x = _vectors("minilm-static", texts)
    assert x.shape[1] == make_encoder("minilm-static").dim < torch_vectors.shape[1]
    iu = np.triu_indices(len(texts), k=1)
    a, b = (torch_vectors @ torch_vectors.T)[iu], (x @ x.T)[iu]
    ranks = [np.argsort(np.argsort(v)) for v in (a, b)]
    assert float(np.corrcoef(*ranks)[0, 1]) > 0.6  # Spearman ρ of pairwise similarities: 0.69
    # nearest neighbour of each prompt under MiniLM is among static's 5 nearest
    sa, sb = torch_vectors @ torch_vectors.T, x @ x.T
    np.fill_diagonal(sa, -2)
    np.fill_diagonal(sb, -2)
    top5 = np.argsort(-sb, axis=1)[:, :5]
    hit = np.mean([sa[i].argmax() in top5[i] for i in range(len(texts))])
    assert hit >= 0.55  # measured 0.63: a coarser space, judged by the routing it gives


def test_static_table_stays_as_stored_and_gives_model2vecs_mean(exports, texts):
    """The static table is held as stored (float16: half a float32 copy's memory per worker);
    Φ is the normalised float32 mean of the rows model2vec's own ``StaticModel`` tokenizes a
    text to (serving reads the export without importing model2vec), to the bit."""
    from model2vec import StaticModel

    from router_core.encoders.exports import ensure_export

    enc = make_encoder("minilm-static")
    edge = ["", "   ", "[UNK] [CLS] [SEP] hello", "日本語 🙂 e\u0301", "word " * 600]
    sample = list(texts[:5]) + edge
    x = enc.encode(sample)
    reference = StaticModel.from_pretrained(str(ensure_export("minilm-static", enc.cache_dir)))
    reference.tokenizer.enable_truncation(enc.max_seq_length - 2, direction=enc.truncation_side)
    assert enc._table.dtype == reference.embedding.dtype == np.float16
    wide = np.asarray(reference.embedding, dtype=np.float32)
    for i, ids in enumerate(reference.tokenize(sample)):
        if not ids:  # no known word piece: the table's mean direction
            np.testing.assert_allclose(x[i], wide.mean(axis=0) / np.linalg.norm(wide.mean(axis=0)),
                                       rtol=1e-5, atol=1e-6)
            continue
        v = wide[ids].mean(axis=0)
        np.testing.assert_array_equal(x[i], v / max(float(np.linalg.norm(v)), 1e-12))


def test_every_kind_round_trips_through_an_artifact(tmp_path):
    base = load_router()
    for kind in known_kinds():
        settings = make_encoder(kind).settings()
        assert settings["kind"] == kind and settings["truncation_side"] == "left"
        router = dataclasses.replace(base, config={**base.config, "encoder": settings})
        loaded = load_router(save_router(router, tmp_path / kind))
        rebuilt = encoder_for_router(loaded.config)
        assert type(rebuilt) is type(make_encoder(kind)) and rebuilt.settings() == settings
    # before kinds were recorded every artifact was torch MiniLM
    legacy = {"encoder": {"model": "sentence-transformers/all-MiniLM-L6-v2"}}
    assert isinstance(Encoder.for_router(legacy), Encoder)
    with pytest.raises(ValueError, match="unknown encoder kind"):
        make_encoder("nope")


@pytest.fixture(scope="module")
def static_artifact(exports, mbpp_csv, tmp_path_factory):
    """A router trained by `tollgate train --encoder minilm-static` on the mbpp slice."""
    from gateway.cli import main

    out = tmp_path_factory.mktemp("static") / "router"
    args = ["train", "--dataset", str(mbpp_csv), "--out", str(out), "--quiet", "--no-caro"]
    args += ["--encoder", "minilm-static"]
    for setting in ("n_probes=32", "epochs=3", "hidden=32"):
        args += ["--set", setting]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    return out


def test_train_records_the_encoder_it_embedded_with(static_artifact):
    encoder = load_meta(static_artifact)["config"]["encoder"]
    assert encoder == make_encoder("minilm-static").settings()
    assert load_router(static_artifact).head.in_dim == make_encoder("minilm-static").dim


SERVE_WITHOUT_TORCH = textwrap.dedent(
    """
    import json, sys
    from router_core.artifact import load_router
    from router_core.encoders import encoder_for_router
    router = load_router(sys.argv[1])
    encoder = encoder_for_router(router.config)
    q = router.project(encoder.encode(["Write a Python function to reverse a list."]))
    decision = router.route(q[0], lam=0.5)
    print(json.dumps({"kind": type(encoder).kind, "chosen": decision.chosen,
                      "torch": "torch" in sys.modules}))
    """
)


def test_onnx_and_static_artifacts_route_in_a_process_without_torch(
    exports, static_artifact, tmp_path
):
    base = load_router()
    int8 = dataclasses.replace(
        base, config={**base.config, "encoder": make_encoder("minilm-onnx-int8").settings()}
    )
    for path in (save_router(int8, tmp_path / "int8"), static_artifact):
        done = subprocess.run(
            [sys.executable, "-c", SERVE_WITHOUT_TORCH, str(path)],
            capture_output=True,
            text=True,
            check=False,
            timeout=300,
        )
        assert done.returncode == 0, done.stderr
        report = json.loads(done.stdout.strip().splitlines()[-1])
        assert report["torch"] is False
        assert report["chosen"] in load_router(path).model_names
        assert report["kind"] == load_meta(path)["config"]["encoder"]["kind"]
