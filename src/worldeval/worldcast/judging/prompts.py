"""WorldCast's judge prompts, written for this project (the generation requests are in
`generation/requests.py`).

They implement the paper's rubric (score levels, judge-only hints, the
inspect -> challenge -> revise procedure, the `{"score", "evidence"}` answer)
in our own words. Each metric's text has a version hash (`prompt_version`,
kept on the metric's spec in `metrics.py`) that is stored with every
judgment, so scores made with different prompt texts are never mixed up
silently.
"""

from __future__ import annotations

import hashlib

_COMMON = """General rules for this assessment:
- Only what is visible in the generated images counts. A caption, label, arrow, text plan or a convincing story
  is not proof that something happened.
- The judge-only HINTS were written by the benchmark authors for you; the generator never saw them. Use them to
  know which objects, milestones and constraints matter. They tell you where to look; they never replace
  visible evidence.
- Text or graphics drawn over an image by the generator do not change what the scene itself shows.
  If part of an image is cut off, judge from what can be seen.
- Work in three passes before answering:
  1. INSPECT: go through the inputs, decide what the task demands, and give a provisional score from the levels.
  2. CHALLENGE: deliberately search for what you may have missed: counterexamples, hidden defects, other
     readings of the images, evidence that speaks for a higher or lower level.
  3. REVISE: change the provisional score only if the challenge found something visible that justifies it;
     otherwise keep it. Do not change the score just to have changed it.
"""

_PA = """You are auditing one metric: PROGRESS ALIGNMENT (PA), the process part of Task Completion.
Strict mode: when in doubt between two levels, the evidence must earn the higher one.

Question: looking at the whole ordered sequence of generated states, does the task unfold the way the user
intended, with every milestone that matters actually reached, in an order that works?

First work out the milestones from the instruction, the hints and the references. A milestone is
INDISPENSABLE when the instruction or hints stress it, when the user's central goal cannot be met without it,
or when a later required state depends on it. Note any order the task requires or that logic forces.

Levels:
2 - The sequence carries out the intended process. Every required milestone is shown as accomplished, not
    just started, approached, implied or described, and the milestones appear in a workable order. Nothing
    essential is skipped, premature, reversed, contradicted or off-topic. A right start plus a right ending
    does not make up for a missing stage in between.
1 - The core process is recognisable and each indispensable milestone is substantially shown, but something
    secondary is off: a non-essential stage is missing, unclear, out of place or unsupported, or details are
    imprecise, without defeating the user's main intent. Prominent generator-added captions, step numbers,
    arrows or guide graphics that nobody asked for can also hold an otherwise complete sequence at 1.
0 - At least one indispensable milestone is absent, only begun or approached, ambiguous, out of an order the
    process needs, interrupted or undone, contradicted, carried out in a basically incorrect manner, or only claimed.
    Also 0 when the images stay essentially the same although the task needs change, or when the changes do
    not add up to the requested task. Correct parts elsewhere, a matching scene or a good-looking last image
    do not compensate.
"""

_OC = """You are auditing one metric: OUTCOME COMPLETION (OC), the end-state part of Task Completion.
Strict mode: there is no partial credit.

Question: does the FINAL generated image show the result the user asked for? The instruction was written for
a whole sequence, but you are given only the last image. Separate what the end state must look like from
how the task gets there, and do not expect the last image to show earlier actions.

Levels:
1 - The final image shows the requested end state with every indispensable end condition visibly met: the
    required objects, counts, attributes, arrangement, where things are and how they relate, and the
    features taken from the references, wherever the instruction or hints specify them or the user's goal depends on them. The result
    can be checked in the image; nothing required is missing, wrong, swapped or hidden.
0 - Any required end condition is missing, wrong, contradicted, incomplete or cannot be verified, even if the
    defect looks small. An end condition is indispensable when the instruction or hints name it as part of
    the result, or when the requested result fails without it; a milestone on the way is an end condition only
    if the end state itself still has to show it. Also 0 when text, labels, arrows or a plan claim the result but the picture does not show it. Do not
    conclude that an object was moved, removed or used up merely because you cannot see it; when absence is
    the goal, give the point only when the place in question can be seen and is empty.
"""

_CP = """You are auditing one metric: CAUSAL PLAUSIBILITY (CP).
Strict mode: when in doubt between two levels, the evidence must earn the higher one.

Question: across the whole ordered sequence, does each change follow from what came before under the rules
that govern this task: object transformations, physics, everyday phenomena, game rules, logical dependencies
and any task-specific rules? Assume ordinary real-world physics unless the task sets up its own world
(a game, a diagram, a fiction, a symbolic puzzle); then that world's rules apply.

Levels:
3 - Every concern raised by the instruction or hints is satisfied with visible evidence. Each critical
    transition is visibly produced by the preceding state and action; the working mechanism, the constraints,
    how objects are connected, and links between distant steps all stay valid, with no deviation and no skipped
    mechanism hidden behind a plausible last image.
2 - The intended mechanism is clear and the key states and the changes between them mostly obey the governing
    rules, but there is a minor flaw: a small local rule deviation, a weakened mechanism, an incomplete
    long-range dependency or a minor unsupported transition. No critical part is left out, contradicted or
    swapped for a sudden structural change, and the instruction/hint concerns are at least partly met.
1 - The core mechanism can still be recognised and one or more critical causes visibly lead to their effects, but a
    core concern of the instruction or a checkable hint condition is clearly broken at a critical point, or a
    critical action, prerequisite or constraint is missing, unsupported or mechanically impossible. A process
    that is plausible in itself but hardly connected to the references, instruction or hints also gets 1.
    Resemblance of theme or a believable end state alone does not reach 1 when the central mechanism is not
    shown.
0 - The mechanism that should produce the main change is missing, runs backwards, is contradicted, or is
    swapped for an unexplained transformation; the main result relies on a key object, action or state that
    appears, vanishes, jumps, duplicates or changes with no visible or ordinary cause; or the process
    contradicts itself or is impossible under the applicable rules. A matching subject or good-looking ending
    does not rescue it.

Caps and grading:
- If the task needs visible change but the images barely differ, CP is at most 1.
- When some task-critical change cannot be explained causally from the states that are shown, CP is at most 1.
  Ordinary motion between two shown states may be assumed only when those states are compatible and nothing
  had to be invented in between (no hidden intervention, changed constraint or unseen state).
- Judge a jump by its causal weight, not by how sudden it looks: harmless compression costs nothing, a
  weakened or imprecise local mechanism points to 2, an unsupported critical transition caps at 1, and a
  core process that cannot happen or contradicts itself points to 0.
- Object conservation: when an object or tool that matters for the task is in one image and gone in a later one, and
  nothing shown or reasonably implied accounts for it (it was not taken away, put somewhere, used up,
  transformed, hidden behind something or moved out of view), CP is at most 1, also when the object had
  already served its purpose; it is 0 when that loss removes the central mechanism or leaves the main
  result unexplained.
- Keep this separate from Visual Consistency: a change of look, identity or shape is penalised under CP
  only if it breaks the causal chain or makes the next state unreachable.

How to check: first fix the world rules and the critical states, constraints and dependencies. Then for every
adjacent pair name the prior state, the cause or action, and the result; follow each relevant object and
tool (where it stays, how it moves, whether it appears, disappears, duplicates, is used up or transforms, and
why); check support, contact, containment, connectivity of parts, material behaviour, object counts,
temporal order, tool availability, geometry and task logic. Then check long-range links: whether an earlier
step enables or rules out a later one.
"""

_VC = """You are auditing one metric: VISUAL CONSISTENCY (VC).
Strict mode: when in doubt between two levels, the evidence must earn the higher one.

Question: across the ordered sequence, does everything that ought to persist stay the same? Exempt are only
the specific changes the user asked for or that the shown process visibly causes. Anything else that changes
(what an object is, how many there are, its shape, size, colour or material, how its parts connect or its
mechanism is built, where it sits relative to others, the viewpoint, the background) is a consistency error.

Levels:
3 - All task-relevant properties listed above hold steady. Every change is explained by the visible process;
    nothing appears, disappears, duplicates, jumps, is swapped for another structure or drifts gradually. The
    generator added no captions, step numbers, explanations, arrows or other guide marks unless requested
    (text that already belongs to the scene in the references is fine).
2 - The key objects named or stressed by the instruction or hints stay stable except for slight drift that
    recovers later; objects that are not stressed may show a small but real deviation (what they are, their
    form, size or place, or the background).
1 - The target can still be recognised, yet continuity is weak: a key object clearly changes in at
    least one of the properties above, or unstressed objects deviate strongly in a way that affects the whole
    sequence.
0 - The target is not preserved; important objects are lost, added or duplicated without explanation; or
    there is a major scale jump, teleport, background reset, severe deformation, replaced topology or
    mechanism, strange textures or distortions nothing explains. An important object that is simply gone,
    with no shown act of taking it away or putting it somewhere, is a failure: do not assume it was put away.
    The score is 0 whenever an object or tool that the hints name, or that the instruction needs unchanged,
    pops up, is gone or is doubled and the images show no reason (it was not carried in or out, used up,
    transformed or covered).

How to check: compare neighbouring images and also images far apart (to catch slow drift). Follow each object
and tool that matters for the task through the sequence: how many, where, and how it looks.
"""

_STEP = """You are auditing one metric: DESIGNATED-STEP ACCURACY for a single step of a generated sequence.
Strict mode: there is no partial credit.

Question: does the image generated for the designated step do what that exact step of the task requires?
Work out from the instruction, hints and references which concrete action or state belongs to this step.
The generator's own text plan for the step is shown when it exists; the user's task outranks the plan, and an
image that faithfully follows a mistaken or off-topic plan still fails. Judge this one image only; other steps are
not yours to score, and a failure elsewhere is not this step's fault. Do not invent an unseen earlier image
to claim that something disappeared or deformed.

Levels:
1 - The image visibly realises this step's requirement: the required action or state, entities, quantities,
    attributes, spatial and reference relations are there. It agrees with its paired plan and moves the task
    forward. Contact, support, containment, geometry, counts and material behaviour are physically compatible
    with what is shown. No task-relevant object appears, vanishes, duplicates, jumps or deforms without a
    reason visible in the supplied images (required transformations and real occlusion are fine). Hint
    requirements that concern this step are met.
0 - The change shown is irrelevant to the required milestone, or the image is a repeat or nearly unchanged
    (unless holding the state is what the step asks); it leaves out or gets wrong something the step needs
    (an action, a state, an object, a number, a property, a relation, a local constraint); uses the wrong reference; shows a different action;
    contradicts its plan or makes no real progress (a plan that claims success is not evidence); shows a
    physical or task-rule violation; or leaves a step-specific hint requirement unmet or only partly met.

Any deduction must point at something visible in the designated image.
"""

_CONTRACT = """Answer with a single JSON object and nothing else:
{{"score": <integer, one of {levels}>, "evidence": "<one or two sentences naming what you saw that decides the score>"}}"""

_STEP_CONTRACT = """Answer with a single JSON object and nothing else:
{{"step_index": {step}, "score": <integer, 0 or 1>, "evidence": "<one or two sentences naming what you saw in this image>"}}"""

# Bumped by hand when the way inputs are laid out (labels, order) changes.
DATA_LAYOUT_VERSION = "layout-v1"
COMMON = _COMMON
RUBRICS = {"PA": _PA, "OC": _OC, "CP": _CP, "VC": _VC, "STEP": _STEP}
SCORE_CONTRACT = _CONTRACT
STEP_CONTRACT = _STEP_CONTRACT


def prompt_version(rubric: str, contract: str) -> str:
    """The hash stored with every judgment: rubric, common rules, answer contract and input layout."""
    text = "\n".join([rubric, _COMMON, contract, DATA_LAYOUT_VERSION])
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:12]
