"""TensorFlow paths: plugin correctness against dense Adam and the NumPy reference.

TensorFlow is imported when the first test here runs (the ``tf`` fixture), and so are the
workload modules that import it, not when the file is collected: importing it costs 5 s of
CPU, and every pytest-xdist worker collects this file while only one of them runs it.
"""

import numpy as np
import pytest

from jupyterlab_nvdashboard.workload.config import make_config
from jupyterlab_nvdashboard.workload.data import initial_table, make_pool
from jupyterlab_nvdashboard.workload.xp_path import ArrayTrainer


@pytest.fixture(scope="module", autouse=True)
def tf():
    return pytest.importorskip("tensorflow")


def _train_plugin(initial, batches, weights, dense_fraction=0.5, keys=None):
    import tensorflow as tf

    from jupyterlab_nvdashboard.workload.plugin import SparseAdam, SparseEmbedding, embedding_lookup
    emb = SparseEmbedding(initial, keys=keys)
    opt = SparseAdam(learning_rate=0.01, dense_update_fraction=dense_fraction)
    for ids, w in zip(batches, weights, strict=True):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(embedding_lookup(emb, ids) * w)
        grad = tape.gradient(loss, emb.table)
        assert isinstance(grad, tf.IndexedSlices)
        assert len(np.unique(grad.indices.numpy())) == len(grad.indices.numpy())
        opt.apply(emb, grad)
    return emb


def _batches(rng, vocab, steps, always):
    batches, weights = [], []
    for _ in range(steps):
        ids = np.concatenate([always, rng.integers(0, vocab, size=30), always]).astype(np.int64)
        batches.append(ids.reshape(-1, 2))
        weights.append(rng.standard_normal((ids.size // 2, 2, 4)).astype(np.float32))
    return batches, weights


@pytest.mark.parametrize("dense_fraction", [1.0, 0.0])
def test_sparse_adam_matches_dense_adam_on_rows_touched_every_step(dense_fraction, tf):
    import keras

    rng = np.random.default_rng(0)
    vocab, always = 200, np.arange(10)
    initial = rng.uniform(-0.05, 0.05, size=(vocab, 4)).astype(np.float32)
    batches, weights = _batches(rng, vocab, 15, always)
    emb = _train_plugin(initial, batches, weights, dense_fraction)

    table = tf.Variable(initial)
    dense = keras.optimizers.Adam(learning_rate=0.01)
    for ids, w in zip(batches, weights, strict=True):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(tf.nn.embedding_lookup(table, ids) * w)
        dense.apply_gradients([(tf.convert_to_tensor(tape.gradient(loss, table)), table)])
    got, want = emb.table.numpy()[always], table.numpy()[always]
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-9)


def test_lazy_semantics_and_dense_update_agree():
    rng = np.random.default_rng(1)
    initial = rng.uniform(-0.05, 0.05, size=(50, 4)).astype(np.float32)
    batches, weights = _batches(rng, 50, 6, np.arange(3))
    sparse = _train_plugin(initial, batches, weights, dense_fraction=1.0)
    dense = _train_plugin(initial, batches, weights, dense_fraction=0.0)
    np.testing.assert_allclose(sparse.table.numpy(), dense.table.numpy(), rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(sparse.m.numpy(), dense.m.numpy(), rtol=1e-6, atol=1e-12)
    # Moments of rows never touched stay exactly zero (not decayed, never written).
    touched = np.unique(np.concatenate([b.ravel() for b in batches]))
    untouched = np.setdiff1d(np.arange(50), touched)
    assert untouched.size and not sparse.m.numpy()[untouched].any()


def test_arbitrary_int64_keys_via_searchsorted():
    from jupyterlab_nvdashboard.workload.plugin import SparseEmbedding, embedding_lookup
    keys = np.array([10**12, -5, 42, 7], dtype=np.int64)
    initial = np.arange(16, dtype=np.float32).reshape(4, 4)
    emb = SparseEmbedding(initial, keys=keys)
    out = embedding_lookup(emb, np.array([[42, -5], [10**12, 42]], dtype=np.int64)).numpy()
    np.testing.assert_array_equal(out[0, 0], initial[2])
    np.testing.assert_array_equal(out[0, 1], initial[1])
    np.testing.assert_array_equal(out[1, 0], initial[0])
    with pytest.raises(ValueError, match="not in the vocabulary"):
        embedding_lookup(emb, np.array([3], dtype=np.int64))


def test_plugin_clear_errors(tf):
    from jupyterlab_nvdashboard.workload.plugin import SparseEmbedding, embedding_lookup
    emb = SparseEmbedding(np.zeros((8, 4), np.float32))
    cases = [
        (np.array([1, 8]), "outside the vocabulary"),
        (np.array([-1]), "outside the vocabulary"),
        (np.array([1.0, 2.0]), "int32 or int64"),
        (tf.constant([1.5]), "int32 or int64"),
        (np.int64(3), "scalar"),
    ]
    for ids, match in cases:
        with pytest.raises(ValueError, match=match) as err:
            embedding_lookup(emb, ids)
        assert "\n" not in str(err.value)
    with pytest.raises(ValueError, match="2-D"):
        SparseEmbedding(np.zeros(8, np.float32))
    with pytest.raises(ValueError, match="SparseEmbedding"):
        embedding_lookup(tf.Variable(np.zeros((8, 4), np.float32)), np.array([1]))
    assert embedding_lookup(emb, np.array([[1, 2]], np.int32)).shape == (1, 2, 4)


@pytest.mark.parametrize("vocabulary", [512, 8192])  # dense-gradient and dedup modes
def test_plugin_matches_numpy_reference_for_20_steps(vocabulary):
    # float64 on both sides: the two compute the same math in different orders (oneDNN
    # matmuls vs NumPy BLAS, segment sums), so float32 would drift by ~1e-6 per step and
    # hide real differences. In float64 agreement is ~1e-15, so 1e-10 leaves no slack for
    # a wrong formula (the Keras learning rate rounded to float32 alone would show ~1e-8).
    from jupyterlab_nvdashboard.workload.tf_paths import TFTrainer
    cfg = make_config("ci", dtype="float64", vocabulary=vocabulary)
    pool = make_pool(cfg)
    ref, tf_plugin = ArrayTrainer(cfg, pool), TFTrainer("plugin", cfg, pool)
    ref_losses = [ref.step(i) for i in range(20)]
    tf_losses = [tf_plugin.step(i) for i in range(20)]
    assert tf_plugin.embedding.update == ("dense" if vocabulary == 512 else "sparse")
    np.testing.assert_allclose(tf_losses, ref_losses, rtol=1e-10)
    keys = np.unique(np.concatenate([k.ravel() for k in pool.keys]))
    np.testing.assert_allclose(tf_plugin.embedding_of(keys), ref.embedding_of(keys), atol=1e-12)


@pytest.mark.parametrize("path", ["native", "native-dense", "hashtable", "plugin"])
def test_every_tf_path_trains(path):
    from jupyterlab_nvdashboard.workload.tf_paths import TFTrainer
    cfg = make_config("ci")
    trainer = TFTrainer(path, cfg, make_pool(cfg))
    losses = [trainer.step(i) for i in range(40)]
    assert losses[0] > 0.6 and np.mean(losses[-4:]) < 0.5 * losses[0]


def test_the_hashtables_host_stage_is_timed_and_said_in_each_iteration_event(tmp_path):
    """Only the hashtable has a host-only stage (its CPU-only lookup and insert): its
    iteration events say how long it took, and :func:`device_share` leaves it out; the
    other paths' events say 0 ms, and their device worked all but the input wait."""
    from jupyterlab_nvdashboard.workload.events import device_share, read_events
    from jupyterlab_nvdashboard.workload.runner import run

    cfg = make_config("ci", input_delay_ms=2)
    shares = {}
    for path in ("native", "hashtable", "plugin"):
        events_path = tmp_path / f"{path}.jsonl"
        run(path, cfg, 20, device="cpu", warmup=2, events_path=events_path)
        steps = [e for e in read_events(events_path) if e["event"] == "iteration"]
        assert len(steps) == 20
        for step in steps:
            assert step["input_ms"] >= 2.0 and step["host_ms"] is not None
            assert step["input_ms"] + step["host_ms"] <= step["ms"]
            expected = 1 - (step["input_ms"] + step["host_ms"]) / step["ms"]
            assert device_share(step) == pytest.approx(expected)
        hosted = [step["host_ms"] for step in steps]
        assert (min(hosted) > 0) if path == "hashtable" else (max(hosted) == 0), (path, hosted)
        shares[path] = float(np.median([device_share(step) for step in steps]))
    assert shares["hashtable"] < min(shares["native"], shares["plugin"]), shares


def test_device_share_of_odd_events():
    from jupyterlab_nvdashboard.workload.events import device_share

    assert device_share({"ms": 10.0}) == 1.0  # nothing measured waiting: all worked
    assert device_share({"ms": 10.0, "input_ms": 4.0, "host_ms": None}) == pytest.approx(0.6)
    assert device_share({"ms": 0.0}) is None and device_share({}) is None
    assert device_share({"ms": 1.0, "input_ms": 2.0}) == 0.0  # clocks disagree: never < 0


def test_embedding_mode_runs():
    from jupyterlab_nvdashboard.workload.tf_paths import TFTrainer
    cfg = make_config("ci")
    trainer = TFTrainer("plugin", cfg, make_pool(cfg), mode="embedding")
    first, later = trainer.step(0), [trainer.step(i) for i in range(1, 10)]
    assert later[-1] < first  # the probe loss is linear: Adam drives it down


def test_out_of_vocab_pool_is_rejected():
    from jupyterlab_nvdashboard.workload.tf_paths import TFTrainer
    cfg = make_config("ci")
    pool = make_pool(cfg)
    pool.keys[0][0, 0, 0] = cfg.vocabulary
    with pytest.raises(ValueError, match="outside the vocabulary"):
        TFTrainer("plugin", cfg, pool)


def test_table_filled_in_chunks_equals_the_whole_table_and_trains_in_place() -> None:
    from jupyterlab_nvdashboard.workload.plugin import SparseEmbedding
    from jupyterlab_nvdashboard.workload.tf_paths import initial_table_variable
    cfg = make_config("ci", vocabulary=1000)
    table = initial_table_variable(cfg, "t", chunk=300)  # three whole chunks and a part
    np.testing.assert_array_equal(table.numpy(), initial_table(cfg))
    emb = SparseEmbedding(table)
    assert emb.table is table and emb.m.shape == table.shape
    with pytest.raises(ValueError, match="keys need the initial table as an array"):
        SparseEmbedding(table, keys=np.arange(1000))


@pytest.mark.parametrize("dense_fraction", [1.0, 0.0])  # sparse and masked-dense updates
def test_table_looked_up_twice_in_a_step_matches_dense_adam(dense_fraction, tf):
    # Two lookups of one table give one IndexedSlices per lookup, concatenated: row 3
    # appears in both. Dense Adam sees the summed gradient; so must SparseAdam.
    import keras

    from jupyterlab_nvdashboard.workload.plugin import SparseAdam, SparseEmbedding, embedding_lookup

    rng = np.random.default_rng(2)
    vocab = 40
    initial = rng.uniform(-0.05, 0.05, size=(vocab, 4)).astype(np.float32)
    emb = SparseEmbedding(initial)
    sparse = SparseAdam(learning_rate=0.01, dense_update_fraction=dense_fraction)
    table = tf.Variable(initial)
    dense = keras.optimizers.Adam(learning_rate=0.01)
    always = np.arange(6)  # in both lookups every step, so lazy and dense Adam agree
    for _ in range(8):
        a = np.concatenate([always, rng.integers(0, vocab, 5)]).astype(np.int64)
        b = np.concatenate([always[::-1], rng.integers(0, vocab, 3)]).astype(np.int64)
        wa = rng.standard_normal((a.size, 4)).astype(np.float32)
        wb = rng.standard_normal((b.size, 4)).astype(np.float32)
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(embedding_lookup(emb, a) * wa)
            loss += tf.reduce_sum(embedding_lookup(emb, b) * wb)
        grad = tape.gradient(loss, emb.table)
        assert isinstance(grad, tf.IndexedSlices)
        assert len(np.unique(grad.indices.numpy())) < len(grad.indices.numpy())  # repeats
        sparse.apply(emb, grad)
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(tf.gather(table, a) * wa) + tf.reduce_sum(tf.gather(table, b) * wb)
        dense.apply_gradients([(tf.convert_to_tensor(tape.gradient(loss, table)), table)])
    np.testing.assert_allclose(emb.table.numpy()[always], table.numpy()[always], rtol=1e-6)
    (momentum,) = [v for v in dense.variables if "momentum" in v.name]
    np.testing.assert_allclose(emb.m.numpy()[always], momentum.numpy()[always], rtol=1e-5)


def _ops_run_by_traced_step(emb):
    """Op types of the graph that ``tf.function`` builds for a lookup and its gradient."""
    import tensorflow as tf

    from jupyterlab_nvdashboard.workload.plugin import embedding_lookup

    @tf.function(autograph=False)
    def step(ids):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(embedding_lookup(emb, ids))
        return tape.gradient(loss, emb.table).values

    ids = tf.constant([[1, 2, 2, 5]], tf.int64)
    graph_def = step.get_concrete_function(ids).graph.as_graph_def()
    ops = {node.op for node in graph_def.node}
    for fn in graph_def.library.function:  # the custom gradient lives in a nested function
        ops.update(node.op for node in fn.node_def)
    return ops, step(ids).numpy()


def test_gradient_kernel_follows_the_tables_placement_inside_tf_function():
    # While tracing, dy.device is "": the choice must come from where the table lives.
    from jupyterlab_nvdashboard.workload.plugin import SparseEmbedding, placed_on_gpu
    assert placed_on_gpu("/job:localhost/replica:0/task:0/device:GPU:0")
    assert not placed_on_gpu("/job:localhost/replica:0/task:0/device:CPU:0")
    assert not placed_on_gpu("")
    emb = SparseEmbedding(np.zeros((8, 4), np.float32))
    assert emb.on_gpu is placed_on_gpu(emb.table.device)
    cpu_ops, cpu_grad = _ops_run_by_traced_step(emb)
    if not emb.on_gpu:
        assert "DenseBincount" in cpu_ops or "Bincount" in cpu_ops
        assert "UnsortedSegmentSum" not in cpu_ops
    # The branch a GPU-placed table takes, traced here on the CPU (TensorFlow has the
    # CPU kernel of the same op), with the same gradient.
    emb.on_gpu = True
    gpu_ops, gpu_grad = _ops_run_by_traced_step(emb)
    assert "UnsortedSegmentSum" in gpu_ops
    assert not {"DenseBincount", "Bincount"} & gpu_ops
    np.testing.assert_array_equal(np.sort(gpu_grad, axis=0), np.sort(cpu_grad, axis=0))
    np.testing.assert_array_equal(gpu_grad.sum(axis=1), [4.0, 8.0, 4.0])  # ids 1, 2, 2, 5


@pytest.mark.gpu
def test_table_on_a_real_gpu_runs_unsorted_segment_sum_on_it(tf):
    from jupyterlab_nvdashboard.workload.plugin import SparseEmbedding
    if not tf.config.list_physical_devices("GPU"):
        pytest.skip("TensorFlow sees no GPU")
    with tf.device("/GPU:0"):
        emb = SparseEmbedding(np.zeros((8, 4), np.float32))
    assert emb.on_gpu
    ops, _ = _ops_run_by_traced_step(emb)
    assert "UnsortedSegmentSum" in ops and not {"DenseBincount", "Bincount"} & ops


def test_tf_trainer_sets_and_reports_tf32_from_the_config(tf):
    from jupyterlab_nvdashboard.workload.tf_paths import TFTrainer
    cfg = make_config("ci", tf32=False)
    try:
        trainer = TFTrainer("plugin", cfg, make_pool(cfg))
        assert trainer.tf32 is False
        assert not tf.config.experimental.tensor_float_32_execution_enabled()
    finally:
        tf.config.experimental.enable_tensor_float_32_execution(True)  # TensorFlow's default
    assert TFTrainer("plugin", make_config("ci"), make_pool(make_config("ci"))).tf32 is True
