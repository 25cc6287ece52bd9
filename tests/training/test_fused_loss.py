"""The fused chunked loss against the plain path (output_projection, then label_smoothed_loss):
sums and gradients to float32 rounding, padding, label smoothing, tied weights, dtypes, edge
cases."""

import pytest
import torch
import torch.nn.functional as F

from tests.helpers.tiny_model import PAD, tiny_config
from tests.helpers.token_batches import tiny_module, token_batch
from transformer_nmt.model import Transformer
from transformer_nmt.training import fused_loss as fused_loss_module
from transformer_nmt.training.fused_loss import fused_loss
from transformer_nmt.training.loss import label_smoothed_loss

N_ROWS, D_MODEL, VOCAB = 53, 24, 97  # a pad every 4th row: 39 real tokens = 3 x 13


def assert_close_float32(actual: torch.Tensor, expected: torch.Tensor) -> None:
    """Equal to float32 rounding: 1e-5 relative, and 1e-5 of the tensor's largest magnitude in
    absolute terms (sums of terms that nearly cancel are only that exact, in either path)."""
    scale = float(expected.detach().abs().max()) if expected.numel() else 0.0
    torch.testing.assert_close(actual, expected, rtol=1e-5, atol=max(1e-5 * scale, 1e-7))


def make_inputs(n=N_ROWS, d=D_MODEL, vocab=VOCAB, dtype=torch.float32):
    """hidden [n, d], weight [vocab, d] (logits of std ~2-3, as a trained model's), labels [n]
    with a pad every 4th row."""
    hidden = torch.randn(n, d).to(dtype).requires_grad_()
    weight = (torch.randn(vocab, d) * 2.5 / d**0.5).to(dtype).requires_grad_()
    labels = torch.randint(1, vocab, (n,))  # the pad id is a column of the vocabulary too
    labels[::4] = PAD
    return hidden, weight, labels


def sums_and_grads(loss_fn, hidden, weight, labels, epsilon, **options):
    """(TokenLosses, grad of hidden, grad of weight) of one loss path, on fresh leaf copies."""
    hidden = hidden.detach().clone().requires_grad_()
    weight = weight.detach().clone().requires_grad_()
    losses = loss_fn(hidden, weight, labels, epsilon, **options)
    losses.loss_sum.backward()
    return losses, hidden.grad, weight.grad


def fused(hidden, weight, labels, epsilon, chunk_size=16):
    return fused_loss(hidden, weight, labels, PAD, epsilon, chunk_size)


def plain(hidden, weight, labels, epsilon):
    return label_smoothed_loss(F.linear(hidden, weight), labels, PAD, epsilon)


@pytest.mark.parametrize("epsilon", [0.0, 0.1])
@pytest.mark.parametrize("chunk_size", [1, 7, 13, 40, 4096])
def test_sums_and_gradients_match_the_plain_path(epsilon, chunk_size):
    """Chunks of the 53 rows (39 real tokens) that leave a shorter last chunk (7, 13, 40) or not
    (1), or exceed them (4096); pad rows of the hidden gradient are exactly zero."""
    hidden, weight, labels = make_inputs()
    ours, grad_hidden, grad_weight = sums_and_grads(
        fused, hidden, weight, labels, epsilon, chunk_size=chunk_size
    )
    theirs, plain_grad_hidden, plain_grad_weight = sums_and_grads(
        plain, hidden, weight, labels, epsilon
    )
    assert int(ours.n_tokens) == int(theirs.n_tokens) == 39
    assert ours.loss_sum.dtype == ours.nll_sum.dtype == torch.float32
    assert_close_float32(ours.loss_sum, theirs.loss_sum)
    assert_close_float32(ours.nll_sum, theirs.nll_sum)
    assert_close_float32(grad_hidden, plain_grad_hidden)
    assert_close_float32(grad_weight, plain_grad_weight)
    assert not grad_hidden[labels == PAD].any()


def test_large_logits_are_as_accurate_as_the_plain_path():
    """V = 3001 and logits of std ~20: against float64, the fused error is at most twice the
    plain path's."""
    hidden, weight, labels = make_inputs(n=64, d=32, vocab=3001)
    hidden = (hidden.detach() * 8).requires_grad_()
    ours = sums_and_grads(fused, hidden, weight, labels, 0.1, chunk_size=24)
    theirs = sums_and_grads(plain, hidden, weight, labels, 0.1)
    exact = sums_and_grads(plain, hidden.double(), weight.double(), labels, 0.1)
    for index in (1, 2):  # the two gradients
        assert_close_float32(ours[index], theirs[index])
        fused_error = (ours[index].double() - exact[index]).abs().max()
        plain_error = (theirs[index].double() - exact[index]).abs().max()
        assert fused_error <= 2 * plain_error + 1e-6 * exact[index].abs().max()
    assert_close_float32(ours[0].loss_sum, theirs[0].loss_sum)


@pytest.mark.parametrize("n_rows", [0, 5])
def test_empty_and_all_padding_give_zero_sums_and_gradients(n_rows):
    hidden, weight, _ = make_inputs(n=n_rows)
    losses = fused(hidden, weight, torch.full((n_rows,), PAD), 0.1, chunk_size=4)
    assert int(losses.n_tokens) == 0 and losses.loss_sum.item() == losses.nll_sum.item() == 0.0
    assert [m.item() for m in losses.means()] == [0.0, 0.0]
    losses.loss_sum.backward()
    assert hidden.grad.shape == hidden.shape and not hidden.grad.any()
    assert weight.grad.shape == weight.shape and not weight.grad.any()


def test_no_gradient_work_without_grad_mode(monkeypatch):
    """Under no_grad (validation) the same sums, and no chunk computes gradient pieces."""
    hidden, weight, labels = make_inputs()
    expected = fused(hidden, weight, labels, 0.1)
    flags = []
    original = fused_loss_module._chunk_forward

    def spy(*arguments):
        flags.append(arguments[5])
        return original(*arguments)

    monkeypatch.setattr(fused_loss_module, "_chunk_forward", spy)
    with torch.no_grad():
        losses = fused(hidden, weight, labels, 0.1)
    assert flags == [False] * 4 and not losses.loss_sum.requires_grad  # 53 rows, chunks of 16
    assert torch.equal(losses.loss_sum, expected.loss_sum.detach())


def test_backward_scales_and_retains_like_autograd():
    """``loss_sum / tokens`` scales the gradients; retain_graph backpropagates twice; a second
    backward without it, and second-order gradients, are refused."""
    hidden, weight, labels = make_inputs()
    _, grad_hidden, _ = sums_and_grads(plain, hidden, weight, labels, 0.1)
    ours = hidden.detach().clone().requires_grad_()
    losses = fused(ours, weight, labels, 0.1)
    (losses.loss_sum / 123.0).backward(retain_graph=True)
    (losses.loss_sum / 123.0).backward()
    assert_close_float32(ours.grad, 2 * grad_hidden / 123.0)
    with pytest.raises(RuntimeError, match="backward through the graph a second time"):
        losses.loss_sum.backward()
    with pytest.raises(RuntimeError, match="no second-order gradients"):
        torch.autograd.grad(fused(ours, weight, labels, 0.1).loss_sum, ours, create_graph=True)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_inputs_compute_in_float32(dtype):
    """The sums equal the float32 path on the upcast values; gradients come back in the input
    dtype."""
    hidden, weight, labels = make_inputs(dtype=dtype)
    ours, grad_hidden, grad_weight = sums_and_grads(fused, hidden, weight, labels, 0.1)
    theirs, plain_grad_hidden, _ = sums_and_grads(
        plain, hidden.float(), weight.float(), labels, 0.1
    )
    assert ours.loss_sum.dtype == torch.float32 and grad_hidden.dtype == grad_weight.dtype == dtype
    assert_close_float32(ours.loss_sum, theirs.loss_sum)
    torch.testing.assert_close(grad_hidden.float(), plain_grad_hidden, rtol=1e-2, atol=1e-4)


def plain_on_bf16_logits(hidden, weight, labels, epsilon):
    """The plain path under bf16 autocast: bf16 logits (F.linear's), a float32 loss on them."""
    logits = (hidden.bfloat16() @ weight.bfloat16().t()).float()
    return label_smoothed_loss(logits, labels, PAD, epsilon)


def test_under_autocast_the_products_run_in_its_dtype():
    """Under bf16 autocast the logits are the bf16 product, as on the plain path, and the softmax
    and sums float32: the loss equals the plain path's on those logits to float32 rounding, the
    gradients to bf16 rounding (the products behind them are bf16 on both paths)."""
    hidden, weight, labels = make_inputs(n=200, d=64, vocab=500)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        ours, grad_hidden, grad_weight = sums_and_grads(fused, hidden, weight, labels, 0.1)
    theirs, plain_grad_hidden, plain_grad_weight = sums_and_grads(
        plain_on_bf16_logits, hidden, weight, labels, 0.1
    )
    _, float32_grad_hidden, _ = sums_and_grads(fused, hidden, weight, labels, 0.1)
    assert_close_float32(ours.loss_sum, theirs.loss_sum)
    assert grad_hidden.dtype == grad_weight.dtype == torch.float32
    for grad, expected in ((grad_hidden, plain_grad_hidden), (grad_weight, plain_grad_weight)):
        error = float((grad - expected).norm() / expected.norm())
        assert error < 1e-2, error
    float32_error = float((float32_grad_hidden - grad_hidden).norm() / grad_hidden.norm())
    assert 1e-4 < float32_error < 2e-2  # the products did run in bf16: its rounding, no more


@pytest.mark.parametrize(
    ("options", "error"),
    [
        (dict(epsilon=1.0), ValueError),
        (dict(chunk_size=0), ValueError),
        (dict(chunk_size=2.5), ValueError),
        (dict(labels=torch.zeros(N_ROWS)), TypeError),
        (dict(labels=torch.zeros(N_ROWS - 1, dtype=torch.long)), ValueError),
        (dict(weight=torch.zeros(VOCAB, D_MODEL + 1)), ValueError),
    ],
)
def test_invalid_arguments_are_refused(options, error):
    hidden, weight, labels = make_inputs()
    arguments = dict(hidden=hidden, weight=weight, labels=labels, pad_id=PAD, epsilon=0.1)
    with pytest.raises(error):
        fused_loss(**{**arguments, **options})


@pytest.mark.parametrize(("share_all", "tie"), [(False, True), (True, True), (False, False)])
def test_every_transformer_gradient_matches_the_plain_path(share_all, tie):
    """Through the whole model: the output projection's weight, tied to the target embedding (and
    to the source one with share_all_embeddings), gets both contributions, as on the plain
    path."""
    vocab = dict(src_vocab_size=19) if share_all else {}
    config = tiny_config(dropout=0.0, share_all_embeddings=share_all, tie_embeddings=tie, **vocab)
    model = Transformer(config)
    batch = token_batch(23, seed=1, src_vocab_size=config.src_vocab_size)
    gradients = []
    for forward, loss in [
        (model.forward, lambda logits: label_smoothed_loss(logits, batch["labels"], PAD, 0.1)),
        (
            model.forward_hidden,
            lambda hidden: fused_loss(
                hidden, model.output_projection.weight, batch["labels"], PAD, 0.1, chunk_size=5
            ),
        ),
    ]:
        losses = loss(forward(batch["src_ids"], batch["tgt_in_ids"]))
        (losses.loss_sum / losses.n_tokens).backward()
        gradients.append({name: p.grad.clone() for name, p in model.named_parameters()})
        model.zero_grad(set_to_none=True)
    assert (model.output_projection.weight is model.decoder.embedding.weight) == tie
    for name, grad in gradients[0].items():
        torch.testing.assert_close(gradients[1][name], grad, rtol=1e-5, atol=1e-6, msg=name)


def test_the_module_validates_alike_with_either_loss():
    """Validation (no grad) of the training module: the same token-weighted loss and NLL."""
    batches = [token_batch(n, seed) for seed, n in enumerate((3, 30))]
    plain_module = tiny_module(fused_loss=False)
    fused_module = tiny_module(fused_loss=True)
    fused_module.load_state_dict(plain_module.state_dict())
    with torch.no_grad():
        for module in (plain_module, fused_module):
            for batch in batches:
                module.validation_step(batch, 0)
    for metric in ("eval_loss", "eval_nll"):
        torch.testing.assert_close(
            getattr(fused_module, metric).compute(), getattr(plain_module, metric).compute()
        )


def test_a_model_with_an_output_bias_trains_on_the_loss_with_its_bias():
    """The fused loss has no bias term: with ``output_bias`` the module takes the plain path, so
    the bias counts in the loss and gets its gradient."""
    batch = token_batch(30, seed=3)
    biased = tiny_config(dropout=0.0, output_bias=True).to_dict()
    plain_module = tiny_module(model_config=biased, fused_loss=False)
    asked_fused = tiny_module(model_config=biased, fused_loss=True)
    with torch.no_grad():
        plain_module.model.output_projection.bias.uniform_(-2.0, 2.0)
    asked_fused.load_state_dict(plain_module.state_dict())
    losses = []
    for module in (plain_module, asked_fused):
        loss = module.batch_losses(batch).loss_sum
        loss.backward()
        losses.append(loss.detach())
    torch.testing.assert_close(losses[1], losses[0])
    bias_gradient = asked_fused.model.output_projection.bias.grad
    assert bias_gradient is not None and bias_gradient.abs().sum() > 0
    torch.testing.assert_close(bias_gradient, plain_module.model.output_projection.bias.grad)


@pytest.mark.slow  # compiles
def test_a_compiled_hidden_state_forward_with_the_loss_outside_matches_eager():
    """The module's compile=True: the model's forward_hidden compiled, the fused loss eager."""
    torch._dynamo.reset()
    model = Transformer(tiny_config(dropout=0.0))
    batch = token_batch(23, seed=2)
    gradients, losses = [], []
    for forward in (model.forward_hidden, torch.compile(model.forward_hidden, backend="aot_eager")):
        hidden = forward(batch["src_ids"], batch["tgt_in_ids"])
        loss = fused(
            hidden, model.output_projection.weight, batch["labels"], 0.1, chunk_size=4
        ).loss_sum
        loss.backward()
        losses.append(loss.detach())
        gradients.append({name: p.grad.clone() for name, p in model.named_parameters()})
        model.zero_grad(set_to_none=True)
    torch.testing.assert_close(losses[1], losses[0], rtol=1e-5, atol=1e-5)
    for name, grad in gradients[0].items():
        torch.testing.assert_close(gradients[1][name], grad, rtol=1e-5, atol=1e-6, msg=name)
