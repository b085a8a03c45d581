"""A scripted WorldCast judge: the scores it gives each packaged sample, and the final score written out by hand."""

from __future__ import annotations

# Scores the fake judge gives: (PA, OC, CP, VC); OC is only asked when outcome_weight > 0.
SCORES = {
    "correct": {"phys_ball_drop": (2, None, 3, 2), "adapt_cube_box": (2, 1, 2, 3),
                "logic_hanoi2": (1, 1, 3, 3), "goal_tiles": (2, 0, 3, 3)},
    "shuffled": {"phys_ball_drop": (0, None, 1, 2), "adapt_cube_box": (0, 1, 0, 3),
                 "logic_hanoi2": (0, 0, 0, 2), "goal_tiles": (1, 1, 2, 3)},
}
WEIGHTS = {"phys_ball_drop": 0.0, "adapt_cube_box": 0.2, "logic_hanoi2": 0.3, "goal_tiles": 0.5}
CATEGORY = {"phys_ball_drop": "physical_simulation", "adapt_cube_box": "adaptive_task_completion",
            "logic_hanoi2": "logic_and_rules", "goal_tiles": "visual_goal_realization"}
# Designated-step answers for the correct outputs: every step right except these.
STEP_WRONG = {("phys_ball_drop", 3), ("logic_hanoi2", 2)}
STEP_LEN = {"phys_ball_drop": 4, "adapt_cube_box": 2, "logic_hanoi2": 3, "goal_tiles": 4}


def hand_final(pa, oc, cp, vc, w):
    # Written out independently of worldeval.worldcast.scoring (SPEC section 5).
    tc = (1 - w) * pa / 2 + (w * oc if w > 0 else 0)
    return (100 / 3) * (0.4 * 3 * tc + 0.4 * cp + 0.2 * vc), tc


def scripted(info: dict, cases, model: str):
    case = next(c for c in cases if c.instruction in info["text"])
    info["case"] = case.id
    metric = info["metric"]
    info["key"] = (model, case.id, metric, info["step"])
    if metric == "STEP":
        ok = (case.id, info["step"]) not in STEP_WRONG
        return {"step_index": info["step"], "score": int(ok), "evidence": f"step {info['step']}"}
    pa, oc, cp, vc = SCORES[model][case.id]
    score = {"PA": pa, "OC": oc, "CP": cp, "VC": vc}[metric]
    return {"score": score, "evidence": f"{metric} of {case.id} for {model}"}
