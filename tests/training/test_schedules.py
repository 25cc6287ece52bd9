"""Learning-rate schedules: closed-form values, the peak at warmup, and LambdaLR stepping."""

import pytest
import torch

from transformer_nmt.training.schedules import (
    StepSchedule,
    build_scheduler,
    cooldown_factor,
    inverse_sqrt,
    linear_warmup,
    noam,
)


def test_noam_matches_the_paper_formula_and_peaks_at_warmup():
    d_model, warmup = 512, 4000
    assert noam(1, d_model, warmup) == pytest.approx(512**-0.5 * 4000**-1.5)
    assert noam(100, d_model, warmup) == pytest.approx(512**-0.5 * 100 * 4000**-1.5)
    assert noam(16000, d_model, warmup) == pytest.approx(512**-0.5 * 16000**-0.5)
    peak = noam(warmup, d_model, warmup)
    assert peak == pytest.approx(512**-0.5 * 4000**-0.5)  # ≈ 7.0e-4 for the base model
    steps = range(1, 3 * warmup)
    assert max(steps, key=lambda s: noam(s, d_model, warmup)) == warmup
    assert noam(warmup, d_model, warmup, factor=2.0) == pytest.approx(2 * peak)


def test_inverse_sqrt_and_linear_warmup_reach_peak_lr_at_warmup():
    assert inverse_sqrt(4000, 4000, 5e-4) == pytest.approx(5e-4)
    assert inverse_sqrt(2000, 4000, 5e-4) == pytest.approx(2.5e-4)
    assert inverse_sqrt(16000, 4000, 5e-4) == pytest.approx(2.5e-4)
    assert linear_warmup(1000, 4000, 5e-4) == pytest.approx(1.25e-4)
    assert linear_warmup(9000, 4000, 5e-4) == pytest.approx(5e-4)


def test_a_cooldown_falls_linearly_to_zero_over_the_last_steps():
    assert cooldown_factor(700, total_steps=1000, cooldown=300) == 1.0
    assert cooldown_factor(850, total_steps=1000, cooldown=300) == pytest.approx(0.5)
    assert cooldown_factor(1000, total_steps=1000, cooldown=300) == 0.0
    assert cooldown_factor(1200, total_steps=1000, cooldown=300) == 0.0
    plain = StepSchedule(name="inverse_sqrt", warmup=100, d_model=64, peak_lr=1e-3)
    cooled = StepSchedule(
        name="inverse_sqrt", warmup=100, d_model=64, peak_lr=1e-3, cooldown=300, total_steps=1000
    )
    assert [cooled.lr(s) for s in range(1, 701)] == [plain.lr(s) for s in range(1, 701)]
    tail = [cooled.lr(s) for s in range(700, 1001)]
    assert all(a > b for a, b in zip(tail[:-1], tail[1:], strict=True))  # strictly falling
    assert cooled.lr(900) == pytest.approx(plain.lr(900) / 3)


def test_a_cooldown_cut_short_is_reported_with_the_rate_it_ended_at():
    cooled = StepSchedule(
        name="inverse_sqrt", warmup=100, d_model=64, peak_lr=1e-3, cooldown=300, total_steps=1000
    )
    warning = cooled.unfinished_cooldown(850)  # max_time stopped the run half-way down
    assert "step 850 of trainer.max_steps=1,000" in warning
    assert f"{cooled.lr(850):.3g}" in warning and "trainer.max_steps" in warning
    assert cooled.unfinished_cooldown(1000) is None  # the cooldown reached 0
    plain = StepSchedule(name="inverse_sqrt", warmup=100, d_model=64, peak_lr=1e-3)
    assert plain.unfinished_cooldown(850) is None  # nothing to finish


@pytest.mark.parametrize(
    "schedule",
    [
        StepSchedule(name="noam", warmup=10, d_model=64),
        StepSchedule(
            name="inverse_sqrt", warmup=10, d_model=64, peak_lr=1e-3, cooldown=10, total_steps=30
        ),
        StepSchedule(name="inverse_sqrt", warmup=10, d_model=64, peak_lr=1e-3),
        StepSchedule(name="linear_warmup", warmup=10, d_model=64, peak_lr=1e-3),
    ],
    ids=lambda s: s.name,
)
def test_lambda_lr_uses_the_schedule_of_the_next_optimizer_step(schedule):
    parameter = torch.nn.Parameter(torch.zeros(1))
    optimizer = torch.optim.Adam([parameter], lr=1.0)
    scheduler = build_scheduler(optimizer, schedule)
    seen = []
    for _ in range(30):
        seen.append(optimizer.param_groups[0]["lr"])  # the lr this step will use
        optimizer.step()
        scheduler.step()
    assert seen == pytest.approx([schedule.lr(step) for step in range(1, 31)])
    assert max(range(30), key=lambda i: seen[i]) == schedule.warmup - 1  # the warmup-th step


def test_scheduler_state_survives_a_checkpoint_round_trip():
    schedule = StepSchedule(name="noam", warmup=10, d_model=64)
    optimizer = torch.optim.Adam([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    scheduler = build_scheduler(optimizer, schedule)
    for _ in range(7):
        optimizer.step()
        scheduler.step()
    fresh_optimizer = torch.optim.Adam([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    fresh = build_scheduler(fresh_optimizer, schedule)
    fresh.load_state_dict(scheduler.state_dict())
    assert fresh.last_epoch == 7
    assert fresh.get_last_lr()[0] == pytest.approx(schedule.lr(8))


def test_bad_schedule_settings_name_the_fix():
    with pytest.raises(ValueError, match="scheduler=<one of noam, inverse_sqrt"):
        StepSchedule(name="cosine", warmup=10, d_model=64)
    with pytest.raises(ValueError, match="scheduler.warmup must be a positive integer"):
        StepSchedule(name="noam", warmup=0, d_model=64)
    with pytest.raises(ValueError, match="needs a positive scheduler.peak_lr"):
        StepSchedule(name="inverse_sqrt", warmup=10, d_model=64)
    optimizer = torch.optim.Adam([torch.nn.Parameter(torch.zeros(1))], lr=1e-3)
    with pytest.raises(ValueError, match="lr=1.0"):
        build_scheduler(optimizer, StepSchedule(name="noam", warmup=10, d_model=64))
    with pytest.raises(ValueError, match=r"scheduler.cooldown=500 needs .* set trainer.max_steps"):
        StepSchedule(name="noam", warmup=10, d_model=64, cooldown=500, total_steps=-1)
    with pytest.raises(ValueError, match="scheduler.cooldown must be a whole number"):
        StepSchedule(name="noam", warmup=10, d_model=64, cooldown=-5)
