"""`worldeval opis annotate`: build an OPIS case folder from one image."""

from __future__ import annotations

import json
from pathlib import Path
from typing import List, Optional

import typer

from worldeval.cli.common import parse_options
from worldeval.errors import CaseError
from worldeval.judge import JudgeConfig
from worldeval.media import read_image
from worldeval.opis.cases import claims as claims_mod
# The options' defaults are the annotation spec's own, so the command cannot drift from the Python API.
from worldeval.opis.cases.annotate import (AnnotateError, AnnotateSpec, annotate, check_prompt, fit_prompt, label_prompt,
                                           load_spec_file, parse_object_option, write_preview)
from worldeval.opis.cases.claims import MAX_CLAIMS


def _parse_per_object(values: list[str] | None, n: int, option: str) -> list[str | None]:
    """`--kinematics rigid` applies to all objects; `--kinematics 2=deformable` to the 2nd (1-based)."""
    out: list[str | None] = [None] * n
    for v in values or []:
        if "=" in v:
            k, label = v.split("=", 1)
            try:
                i = int(k) - 1
            except ValueError as exc:
                raise typer.BadParameter(f"{v!r}: expected N=LABEL with N the object's 1-based position", param_hint=option) from exc
            if not 0 <= i < n:
                raise typer.BadParameter(f"{v!r}: there are {n} objects", param_hint=option)
            out[i] = label
        else:
            out = [label if label is not None else v for label in out]
    return out


def annotate_cmd(
    image: Optional[Path] = typer.Argument(None, help="Input image I0 (jpg/png). Optional with --spec when the spec names it."),
    out: Path = typer.Option(..., "--out", help="Case folder to write (case.json, input.png, geometry.npz, preview.png)."),
    spec: Optional[Path] = typer.Option(None, "--spec", help="JSON annotation spec (objects, camera, ids); see docs/demo.md."),
    objects: Optional[List[str]] = typer.Option(
        None, "--object", help="'noun phrase:x,y,w,h' (box) or with --point 'noun phrase:x,y'. Repeatable."),
    point: bool = typer.Option(False, "--point", help="--object coordinates are points, not boxes."),
    kinematics: Optional[List[str]] = typer.Option(
        None, "--kinematics", help="rigid|articulated|deformable for all objects, or N=LABEL for the N-th (default: "
                                   "articulated for a person or animal, else rigid)."),
    track: Optional[List[str]] = typer.Option(
        None, "--track", help="static|dynamic for all objects, or N=LABEL (default: dynamic for a person or animal "
                              "or a part of one, else static if rigid, else dynamic)."),
    backend: str = typer.Option(AnnotateSpec.segmenter, "--backend", help="Mask source: grabcut (embedded) or hf (SAM 2/3)."),
    case_id: Optional[str] = typer.Option(None, "--id", help="Case id (default: the output folder's name)."),
    domain: Optional[str] = typer.Option(None, "--domain", help=f"Domain (default {AnnotateSpec.domain})."),
    subcategory: Optional[str] = typer.Option(None, "--subcategory", help=f"Subcategory (default {AnnotateSpec.subcategory})."),
    instruction: Optional[str] = typer.Option(None, "--instruction", help="Text prompt (default: written from the camera task)."),
    camera: Optional[str] = typer.Option(
        None, "--camera", help="Camera preset (pan-right-return, pan-left-return, tilt-up-return, tilt-down-return, "
                               "truck-right-return, dolly-in-return, hold) or a JSON file with a camera_task."),
    amount: Optional[float] = typer.Option(None, "--camera-amount", help="Preset amplitude (degrees, or depth units)."),
    duration: Optional[float] = typer.Option(None, "--duration", help=f"Camera task duration in seconds (default {AnnotateSpec.duration_s:g})."),
    fps: Optional[float] = typer.Option(None, "--fps", help=f"Camera task frame rate (default {AnnotateSpec.fps:g})."),
    max_side: Optional[int] = typer.Option(None, "--max-side", help="Downscale the image so its longest side is at most this."),
    depth: Optional[str] = typer.Option(
        None, "--depth", help="Depth: a .npy/.npz file, or 'model' (a backend's depth estimator); default: flat fallback."),
    dedup_iou: Optional[float] = typer.Option(None, "--dedup-iou", help="Drop an instance overlapping an earlier one at this mask IoU."),
    no_embeddings: bool = typer.Option(False, "--no-embeddings", help="Skip reference embeddings."),
    propose: bool = typer.Option(False, "--propose", help="Ask the configured VLM for noun phrases and boxes."),
    claims: bool = typer.Option(False, "--claims", help="Ask the configured VLM, from I0, for structural claims of every dynamic object "
                                "(parts, connectivity, local shape, material) and store them in case.json. Without IMAGE, --spec "
                                "and --object: add claims to the existing case in --out."),
    max_claims: int = typer.Option(MAX_CLAIMS, "--max-claims", help=f"At most this many claims per object (1-{MAX_CLAIMS})."),
    base_url: Optional[str] = typer.Option(None, "--base-url", help="VLM endpoint (OpenAI-compatible)."),
    judge_model: Optional[str] = typer.Option(None, "--judge-model", help="VLM model name."),
    api_key: Optional[str] = typer.Option(None, "--api-key", help="VLM API key (never written anywhere)."),
    device: str = typer.Option("cpu", "--device", help="Device for the hf backend / depth model."),
    backend_option: Optional[List[str]] = typer.Option(
        None, "--backend-option", help="hf backend option KEY=VALUE (repeatable): sam3=PATH, depth=PATH, models_dir=DIR, "
                                       "score_threshold=...; default models: `worldeval models fetch`'s folder."),
    seed: int = typer.Option(AnnotateSpec.seed, "--seed", help="Seed of GrabCut's initialisation."),
    quiet: bool = typer.Option(False, "--quiet"),
    as_json: bool = typer.Option(False, "--json", help="Print a JSON summary."),
) -> None:
    """Build an OPIS case from IMAGE: masks from box/point prompts, labels, geometry, camera task."""
    opt = dict(locals())  # every option of the command, by name, for the helpers below
    from rich.console import Console
    from rich.markup import escape

    err = Console(stderr=True)
    if claims and image is None and spec is None and not objects:
        _claims_only(out, base_url, judge_model, api_key, max_claims, quiet or as_json, err)
        return
    try:
        case_json, notes = _build_case(opt, err)
        if claims:
            _claims_only(out, base_url, judge_model, api_key, max_claims, quiet or as_json, err)
    except AnnotateError as exc:
        err.print(f"[red]{escape(str(exc))}[/red]")  # escaped: a message quoting "[x, y, w, h]" is not markup
        raise typer.Exit(2)
    _print_summary(case_json, as_json, quiet, notes)


def _build_case(opt: dict, err) -> tuple[Path, list[str]]:
    """Write the case the options describe and its preview.png; (case.json path, notes on clipped boxes)."""
    from rich.markup import escape

    aspec, image_path, origins = _spec_from_options(opt)
    judge = _judge_for(aspec, opt)
    try:
        img = read_image(image_path)
    except ValueError as exc:
        raise AnnotateError(image_path, "image", str(exc)) from exc
    notes = []
    for k, (p, origin) in enumerate(zip(aspec.objects, origins)):
        note = fit_prompt(p, img.shape[1], img.shape[0], origin, k)
        if note:
            notes.append(note)
            if not opt["as_json"]:
                err.print(f"[yellow]{escape(note)}[/yellow]")
    steps = (lambda s: None) if (opt["quiet"] or opt["as_json"]) else (lambda s: err.print(f"[dim]{s}...[/dim]"))
    case_json = annotate(img, aspec, opt["out"], judge_config=judge, device=opt["device"], on_step=steps,
                         backend_options=parse_options(opt["backend_option"] or []))
    write_preview(case_json.parent)
    return case_json, notes


def _spec_from_options(opt: dict):
    """(AnnotateSpec, image path, per object the file or option it came from) from --spec and the
    command-line options, which override the spec. Labels not given are inferred from the noun phrase."""
    spec = opt["spec"]
    if spec is not None:
        aspec, spec_image = load_spec_file(spec)
    else:
        aspec, spec_image = AnnotateSpec(objects=[]), None
    image_path = opt["image"] or spec_image
    if image_path is None:
        raise AnnotateError("IMAGE", "image", "give an image argument or an 'image' field in --spec")
    origins = [str(spec)] * len(aspec.objects)  # who to name when an object's prompt is wrong
    prompts = [parse_object_option(o, point=opt["point"], k=len(origins) + j) for j, o in enumerate(opt["objects"] or [])]
    aspec.objects, origins = aspec.objects + prompts, origins + ["--object"] * len(prompts)
    n = len(aspec.objects)
    for attr, option in (("kinematics", "--kinematics"), ("track", "--track")):
        for k, label in enumerate(_parse_per_object(opt[attr], n, option)):
            if label is not None:
                setattr(aspec.objects[k], attr, label)
                aspec.objects[k].labels_from[attr] = "given"
    for k, p in enumerate(aspec.objects):
        label_prompt(check_prompt(p, origins[k], k))
    aspec.segmenter = opt["backend"]
    aspec.case_id = opt["case_id"] or (aspec.case_id if spec is not None and aspec.case_id != AnnotateSpec.case_id else opt["out"].name)
    for attr, name in (("domain", "domain"), ("subcategory", "subcategory"), ("instruction", "instruction"),
                       ("camera_amount", "amount"), ("duration_s", "duration"), ("fps", "fps"),
                       ("max_side", "max_side"), ("depth", "depth"), ("dedup_iou", "dedup_iou")):
        if opt[name] is not None:
            setattr(aspec, attr, opt[name])
    if opt["depth"] and opt["depth"] != "model":
        aspec.depth = str(Path(opt["depth"]).resolve())
    camera = opt["camera"]
    if camera is not None:
        if camera.endswith(".json"):
            try:
                data = json.loads(Path(camera).read_text(encoding="utf-8"))
            except (OSError, json.JSONDecodeError) as exc:
                raise AnnotateError(camera, "camera_task", f"cannot read: {exc}") from exc
            aspec.camera = data.get("camera_task", data)
        else:
            aspec.camera = camera
    aspec.seed = opt["seed"]
    aspec.embeddings = not opt["no_embeddings"]
    return aspec, image_path, origins


def _judge_for(aspec, opt: dict):
    """The VLM's JudgeConfig when phrases are to be proposed (--propose, or no objects given); else None."""
    if not (opt["propose"] or not aspec.objects):
        return None
    judge = None
    try:
        judge = JudgeConfig.resolve(base_url=opt["base_url"], model=opt["judge_model"], api_key=opt["api_key"])
    except ValueError as exc:
        if not aspec.objects:
            raise AnnotateError("--object", "objects", f"no objects given and no VLM configured ({exc})") from exc
    if opt["propose"]:
        aspec.objects = []
    return judge


def _print_summary(case_json: Path, as_json: bool, quiet: bool, notes: list[str]) -> None:
    from rich.console import Console

    data = json.loads(case_json.read_text(encoding="utf-8"))
    prompts = data["annotation"]["prompts"]  # one per instance, in the same order
    summary = {
        "case": str(case_json.parent),
        "id": data["id"],
        "instances": [{"id": i["id"], "category": i["category"], "bbox": i["bbox"], "kinematics": i["kinematics"],
                       "track": i["track"], "labels_from": p.get("labels_from", {})}
                      for i, p in zip(data["instances"], prompts)],
        "dropped_duplicates": data["annotation"]["dropped_duplicates"],
        "geometry": data["annotation"]["geometry"],
        "preview": str(case_json.parent / "preview.png"),
        "clipped": notes,
    }
    if as_json:
        typer.echo(json.dumps(summary, indent=2))
    elif not quiet:
        Console().print(f"wrote {case_json} with {len(summary['instances'])} instances "
                        f"({len(summary['dropped_duplicates'])} duplicates dropped; geometry: {summary['geometry']})",
                        markup=False)
        for i in summary["instances"]:
            src = i["labels_from"]
            typer.echo(f"  {i['id']}  {i['category']!r}: kinematics {i['kinematics']} ({src.get('kinematics', 'given')}), "
                       f"track {i['track']} ({src.get('track', 'given')})")
        typer.echo(f"preview: {summary['preview']}")


def _claims_only(out: Path, base_url, judge_model, api_key, max_claims: int, quiet: bool, err) -> None:
    """Add structural claims to the case in `out` (exit 2 with the reason when the case or the VLM is not there)."""
    from rich.markup import escape

    if not 1 <= max_claims <= claims_mod.MAX_CLAIMS:
        raise typer.BadParameter(f"must be in 1..{claims_mod.MAX_CLAIMS}", param_hint="--max-claims")
    try:
        config = JudgeConfig.resolve(base_url=base_url, model=judge_model, api_key=api_key)
    except ValueError as exc:
        err.print(f"[red]--claims needs a VLM: {escape(str(exc))}[/red]")
        raise typer.Exit(2)
    try:
        summary = claims_mod.add_claims(out, claims_mod.judge_client(config), max_claims=max_claims,
                                        log=(lambda m: None) if quiet else (lambda m: err.print(m, markup=False)))
    except CaseError as exc:
        err.print(f"[red]{escape(str(exc))}[/red]")
        raise typer.Exit(2)
    if summary["failures"]:
        err.print(f"[yellow]claims failed for {len(summary['failures'])} object(s); run again to retry them[/yellow]")


def register(app: typer.Typer) -> None:
    """Add `annotate` to the `opis` command group."""
    app.command("annotate")(annotate_cmd)
