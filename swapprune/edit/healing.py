"""Heal a pruned model with LoRA, then merge the adapters so the result is a plain model.

:func:`heal` trains low-rank adapters on calibration text (next-token loss,
optionally mixed with a KL-distillation loss against the unpruned model),
merges them into the weights (``merge_and_unload``) and returns the model with
a :class:`HealReport`. peft is imported here only, when healing runs.

docs/method.md section 15: LoRA rank 16 for 200 steps recovered 48-60% of the
pruning-specific perplexity increase on Qwen3-8B; those are the defaults.
"""

from __future__ import annotations

import math
import time
import warnings
from dataclasses import asdict, dataclass, field

import torch
import torch.nn.functional as F

from swapprune.calibration.windows import load_calibration
from swapprune.config import HealConfig
from swapprune.errors import SwappruneError, unknown_name
from swapprune.model.arch import context_length
from swapprune.model.stack import decoder_stack


@dataclass
class HealWindows:
    """Training windows ``train`` ``[N, T]`` and held-out windows ``heldout`` ``[H, T]``."""

    train: torch.Tensor
    heldout: torch.Tensor
    source: dict


@dataclass
class HealReport:
    """What healing did and how the calibration loss moved."""

    steps: int
    wall_s: float
    trainable_params: int
    target_modules: list[str]
    layers: list[int]
    calib_loss_before: float  # mean CE (nats/token) on the first 8 training windows, eval mode
    calib_loss_after: float
    heldout_ppl_before: float  # perplexity on the held-out windows
    heldout_ppl_after: float
    train_loss_first: float  # mean training loss over the first/last tenth of the steps
    train_loss_last: float
    distill: float
    windows: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return asdict(self)


def heal_windows(tokenizer, config: HealConfig, max_positions: int | None = None) -> HealWindows:
    """Cut the training and held-out windows (disjoint), before any forward pass."""
    config.check()
    cal = load_calibration(
        tokenizer,
        config.calib,
        config.prompts + config.heldout,
        config.tokens,
        config.seed,
        max_positions,
    )
    # The pick is in text order; a seeded shuffle keeps held-out windows spread over the text.
    order = torch.randperm(
        cal.input_ids.shape[0], generator=torch.Generator().manual_seed(config.seed)
    )
    ids = cal.input_ids[order]
    return HealWindows(ids[: config.prompts], ids[config.prompts :], cal.describe())


def default_targets(model) -> list[str]:
    """Names (last component) of the linear projections inside the decoder blocks."""
    names = []
    for name, mod in decoder_stack(model).blocks.named_modules():
        # GPT-2 style models use transformers' Conv1D; peft adapts both.
        if isinstance(mod, torch.nn.Linear) or type(mod).__name__ == "Conv1D":
            leaf = name.rsplit(".", 1)[-1]
            if leaf not in names:
                names.append(leaf)
    if not names:
        raise SwappruneError(
            "no linear projections found in the decoder blocks; set heal.target_modules"
        )
    return names


def near_cut_layers(plan) -> list[int]:
    """New (post-pruning) indices of the kept blocks next to a cut, and of merge targets."""
    kept, L = plan.kept, plan.num_layers
    near = set()
    for j, b in enumerate(kept):
        before = b - 1 if j == 0 else kept[j - 1]
        after = L if j == len(kept) - 1 else kept[j + 1]
        if (j == 0 and b > 0) or (j > 0 and b - before > 1) or after - b > 1 or b in plan.merged:
            near.add(j)
    return sorted(near)


def _check_targets(model, targets: list[str]) -> None:
    leaves = {n.rsplit(".", 1)[-1] for n, _ in decoder_stack(model).blocks.named_modules() if n}
    for t in targets:
        if t.rsplit(".", 1)[-1] not in leaves:
            raise unknown_name("heal.target_modules entry", t, sorted(leaves))


@torch.no_grad()
def mean_nll(model, ids: torch.Tensor, batch_size: int = 8) -> float:
    """Mean next-token NLL (nats/token) of ``model`` on windows ``ids`` ``[N, T]``."""
    was_training = model.training
    model.eval()
    device = model.get_input_embeddings().weight.device
    total, count = 0.0, 0
    for s in range(0, ids.shape[0], batch_size):
        batch = ids[s : s + batch_size].to(device)
        logits = model(input_ids=batch, use_cache=False).logits[:, :-1].float()
        total += float(
            F.cross_entropy(
                logits.reshape(-1, logits.shape[-1]), batch[:, 1:].reshape(-1), reduction="sum"
            )
        )
        count += batch[:, 1:].numel()
    model.train(was_training)
    return total / count


def heldout_perplexity(model, windows: HealWindows, batch_size: int = 8) -> float:
    """Perplexity on the held-out windows (the heal stage's own cost metric)."""
    return math.exp(mean_nll(model, windows.heldout, batch_size))


def _loss(student_logits, ids, teacher, distill: float) -> torch.Tensor:
    logits = student_logits[:, :-1].float()  # [B, T-1, V]
    ce = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1))
    if not distill:
        return ce
    with torch.no_grad():
        t = teacher(input_ids=ids, use_cache=False).logits[:, :-1].float()
    s_log = F.log_softmax(logits, -1).reshape(-1, logits.shape[-1])
    t_log = F.log_softmax(t, -1).reshape(-1, t.shape[-1])
    kl = F.kl_div(s_log, t_log, log_target=True, reduction="batchmean")  # mean over positions
    return (1 - distill) * ce + distill * kl


def heal(
    model,
    tokenizer=None,
    config: HealConfig | None = None,
    *,
    plan=None,
    teacher=None,
    windows: HealWindows | None = None,
    progress=None,
):
    """Train LoRA adapters on calibration text and merge them; returns ``(model, HealReport)``.

    Args:
        model: the (pruned) causal LM; its weights change in place.
        tokenizer: cuts the windows unless ``windows`` is given.
        config: a :class:`HealConfig` (defaults when ``None``).
        plan: the applied :class:`~swapprune.plan.PrunePlan` (needed for ``near_cuts``).
        teacher: the unpruned model, needed when ``config.distill > 0``.
        windows: pre-cut :class:`HealWindows` (see :func:`heal_windows`).
        progress: callable taking a one-line status string, or ``None``.

    Returns:
        The merged plain model (no peft modules left) in eval mode, and the report.
    """
    from peft import LoraConfig, get_peft_model  # imports peft

    config = config or HealConfig()
    config.check()
    if config.distill and teacher is None:
        raise SwappruneError("heal.distill > 0 needs the unpruned model as teacher")
    stack = decoder_stack(model)
    if config.near_cuts:
        if plan is None or plan.is_identity:
            raise SwappruneError("heal.near_cuts needs a prune stage that removes or merges blocks")
        layers = near_cut_layers(plan)
    else:
        layers = list(range(stack.num_layers))
    targets = list(config.target_modules or default_targets(model))
    _check_targets(model, targets)
    if windows is None:
        windows = heal_windows(tokenizer, config, context_length(model.config))
    probe = windows.train[:8]
    start = time.perf_counter()
    loss_before = mean_nll(model, probe, config.batch_size)
    ppl_before = heldout_perplexity(model, windows, config.batch_size)

    torch.manual_seed(config.seed)  # LoRA A init
    lora = LoraConfig(
        r=config.rank,
        lora_alpha=config.alpha,  # type: ignore[arg-type]  # peft takes floats
        lora_dropout=config.dropout,
        bias="none",
        target_modules=targets,
        layers_to_transform=layers,
        # Restricts matches to the numbered blocks (never the LM head).
        layers_pattern=stack.spec.blocks.rsplit(".", 1)[-1],
        task_type="CAUSAL_LM",
    )
    grad_flags = {n: p.requires_grad for n, p in model.named_parameters()}
    if config.gradient_checkpointing:
        model.gradient_checkpointing_enable()
        model.enable_input_require_grads()
    with warnings.catch_warnings():  # peft probes a deprecated transformers attribute
        warnings.simplefilter("ignore", FutureWarning)
        peft_model = get_peft_model(model, lora)
    losses = _train(peft_model, windows.train, config, teacher, progress)
    trainable = sum(p.numel() for p in peft_model.parameters() if p.requires_grad)
    model = peft_model.merge_and_unload(safe_merge=True)  # safe_merge: refuse NaN weights
    if config.gradient_checkpointing:
        model.gradient_checkpointing_disable()
        model.disable_input_require_grads()
    for n, p in model.named_parameters():
        p.requires_grad_(grad_flags.get(n, True))
    model.eval()
    leftover = [n for n, m in model.named_modules() if type(m).__module__.startswith("peft")]
    assert not leftover, f"peft modules left after merge: {leftover[:3]}"

    tenth = max(1, config.steps // 10)
    report = HealReport(
        steps=config.steps,
        wall_s=0.0,
        trainable_params=trainable,
        target_modules=targets,
        layers=layers,
        calib_loss_before=loss_before,
        calib_loss_after=mean_nll(model, probe, config.batch_size),
        heldout_ppl_before=ppl_before,
        heldout_ppl_after=heldout_perplexity(model, windows, config.batch_size),
        train_loss_first=sum(losses[:tenth]) / tenth,
        train_loss_last=sum(losses[-tenth:]) / tenth,
        distill=config.distill,
        windows=windows.source,
    )
    report.wall_s = round(time.perf_counter() - start, 3)
    return model, report


def _train(model, train: torch.Tensor, config: HealConfig, teacher, progress) -> list[float]:
    """The LoRA training loop; returns the loss of every step."""
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=config.lr, weight_decay=0.0)
    warm = max(1, config.steps // 10)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / warm) * max(0.0, 1 - s / config.steps)
    )
    gen = torch.Generator().manual_seed(config.seed)
    device = model.get_input_embeddings().weight.device
    order, pos, losses = torch.randperm(train.shape[0], generator=gen), 0, []
    model.train()
    every = max(1, config.steps // 10)
    for step in range(config.steps):
        if pos + config.batch_size > len(order):  # next epoch
            order, pos = torch.randperm(train.shape[0], generator=gen), 0
        ids = train[order[pos : pos + config.batch_size]].to(device)
        pos += config.batch_size
        out = model(input_ids=ids, use_cache=False)
        loss = _loss(out.logits, ids, teacher, config.distill)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.item())
        if progress and ((step + 1) % every == 0 or step == 0):
            progress(f"heal step {step + 1}/{config.steps}: loss {losses[-1]:.4f}")
    model.eval()
    return losses
