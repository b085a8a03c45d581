"""The reusable scene template of `opis source` and the review instruction (our own wording).

Each subcategory lists settings (a place, with objects that belong there:
the review's candidate phrases) and composition variants (how the view is
layered). Image k takes setting k mod S and variant (k div S) mod V, and the
prompt carries k as the variation index so that repeated settings still ask
for a new place and layout. Changing any text here must bump PROMPT_VERSION
(or REVIEW_VERSION): both are recorded in every provenance file.
"""

from __future__ import annotations

PROMPT_VERSION = "opis-source-scene-v1"
REVIEW_VERSION = "opis-source-review-v1"

SUBCATEGORIES: dict[str, dict[str, list]] = {
    "home_indoor": {
        "settings": [
            ("a lived-in kitchen", ["kettle", "mug", "cutting board", "bowl", "jar", "toaster", "plant", "chair"]),
            ("a family living room", ["armchair", "lamp", "cushion", "book", "remote", "vase", "basket", "table"]),
            ("a child's bedroom", ["toy truck", "teddy bear", "desk lamp", "backpack", "ball", "stool", "book"]),
            ("a hallway by the front door", ["coat", "umbrella", "boot", "bench", "key bowl", "bag", "mirror"]),
            ("a home office corner", ["laptop", "keyboard", "mug", "stapler", "notebook", "plant", "chair"]),
        ],
        "compositions": ["a table or counter in the foreground with objects spread across it",
                         "objects at three depths: close to the camera, mid-room, and against the far side",
                         "a diagonal view along furniture, objects partly overlapping one another"],
    },
    "natural_outdoor": {
        "settings": [
            ("a botanical garden path", ["bench", "watering can", "flower pot", "wheelbarrow", "bird", "sign post"]),
            ("a campsite by a lake", ["tent", "kayak", "cooler", "lantern", "camping chair", "backpack", "log"]),
            ("a picnic in a meadow", ["basket", "blanket", "bottle", "apple", "dog", "hat", "frisbee"]),
            ("a rocky beach at low tide", ["bucket", "spade", "crab", "towel", "sandal", "shell", "umbrella"]),
            ("a forest trail clearing", ["deer", "stump", "backpack", "walking stick", "mushroom", "rock"]),
        ],
        "compositions": ["a near ground plane with objects, a middle distance with larger ones, open space behind",
                         "objects scattered along a path that leads away from the camera",
                         "a cluster of objects in front of a natural backdrop, some partly hiding others"],
    },
    "public_indoor": {
        "settings": [
            ("a public library reading room", ["book", "lamp", "chair", "globe", "backpack", "laptop", "cart"]),
            ("a cafe with a service counter", ["cup", "cake stand", "coffee machine", "stool", "menu board", "tray"]),
            ("a museum gallery", ["sculpture", "bench", "vase", "display case", "rope barrier", "visitor"]),
            ("a school science classroom", ["microscope", "beaker", "globe", "chair", "backpack", "skeleton model"]),
            ("a hotel lobby", ["suitcase", "luggage cart", "armchair", "plant", "lamp", "side table"]),
        ],
        "compositions": ["tables or counters in the foreground, furniture in the middle, a far wall with items",
                         "a view down the room with objects repeated at several depths",
                         "a corner view where objects overlap and some are partly hidden"],
    },
    "urban_outdoor": {
        "settings": [
            ("a transit plaza", ["bus", "bench", "bicycle", "trash bin", "scooter", "pigeon", "sign post"]),
            ("a street market", ["fruit crate", "awning stall", "scale", "basket", "cart", "umbrella", "person"]),
            ("a small city park square", ["fountain", "bench", "lamp post", "dog", "stroller", "bicycle"]),
            ("a residential street", ["car", "mailbox", "bicycle", "planter", "trash bin", "cat", "fire hydrant"]),
            ("a harbour promenade", ["boat", "bollard", "bench", "bicycle", "seagull", "lamp post", "crate"]),
        ],
        "compositions": ["street furniture in front, vehicles and people in the middle, buildings behind",
                         "a view along the pavement with objects lined up at several distances",
                         "a busy corner with objects crossing in front of one another"],
    },
}

SCENE_TEMPLATE = (
    "Photorealistic photograph, one coherent wide view in 16:9 landscape format, of {setting}. Layout: "
    "{composition}. Variation {index}: choose a place, arrangement and lighting unlike any other variation. "
    "Show at least 12 separate, clearly visible, complete physical objects (for example {examples}) at "
    "different distances, some overlapping, with a distinct foreground and middle ground, and surfaces and "
    "edges that a moving camera could follow. No readable text, letters, logos or watermarks; no user "
    "interface, captions or frames; no copies of the same object side by side, no broken or malformed "
    "objects; everything in focus without heavy blur; not an empty landscape or a bare wall."
)

REVIEW_TEMPLATE = (
    "IMAGE REVIEW FOR A BENCHMARK INPUT. This generated picture will be the first frame of an image-to-video "
    "test in which every foreground object must stay the same. Candidate object phrases: {candidates}. "
    "1) Give the final list of short, lower-case noun phrases for the concrete foreground objects you see; "
    "leave out background surfaces and scenery (sky, ground, walls, water), text and interface elements. "
    "2) Say which candidates you removed and which phrases you added. 3) List every distinct visible "
    "foreground object instance, one entry each, even when several share a phrase. 4) Rate the picture's "
    "usability as a realistic first frame from 1 (unusable) to 5 (excellent). 5) Flag problems, each as a "
    "short tag: readable_text, logo_or_watermark, ui_or_border, duplicated_object, malformed_object, "
    "heavy_blur, mostly_background, not_photorealistic. Use an empty list when there are none. Reply with a "
    'single JSON object and nothing else: {{"phrases": [...], "removed": [...], "added": [...], '
    '"instances": [{{"phrase": "...", "box": [x, y, w, h]}}], "quality": 1-5, "flags": [...]}}'
)


def scene_prompt(subcategory: str, index: int) -> dict:
    """The generation request of image `index`: prompt text, the parts that made it, candidate phrases."""
    spec = SUBCATEGORIES[subcategory]
    settings, variants = spec["settings"], spec["compositions"]
    setting, candidates = settings[index % len(settings)]
    composition = variants[(index // len(settings)) % len(variants)]
    prompt = SCENE_TEMPLATE.format(setting=setting, composition=composition, index=index,
                                   examples=", ".join(candidates[:5]))
    return {"prompt": prompt, "setting": setting, "composition": composition, "variation_index": index,
            "candidates": list(candidates), "prompt_version": PROMPT_VERSION}


def review_prompt(candidates: list[str]) -> str:
    return REVIEW_TEMPLATE.format(candidates="; ".join(candidates))
