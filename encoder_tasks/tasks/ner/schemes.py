"""Tag schemes for span tagging: IOB1, IOB2 (BIO), BIOES and BMES, converted through IOB2.

Every scheme is read into IOB2 (the scheme models are trained in) and predictions are
written back in the user's scheme. An invalid sequence (``O I-PER`` in IOB2, ``B-PER O`` in
BIOES) is never accepted silently: :func:`to_iob2` raises :class:`InvalidTagSequence`, or,
with ``repair=True``, fixes it the way conlleval reads it and counts the fix.

Example:
    >>> to_iob2(["B-PER", "E-PER", "O", "S-LOC"], "bioes")
    (['B-PER', 'I-PER', 'O', 'B-LOC'], 0)
    >>> from_iob2(["B-PER", "I-PER", "O", "B-LOC"], "bmes")
    ['B-PER', 'E-PER', 'O', 'S-LOC']
    >>> to_iob2(["O", "I-PER"], "iob2", repair=True)
    (['O', 'B-PER'], 1)
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from ...errors import UserError

SCHEMES = ("iob1", "iob2", "bioes", "bmes", "none")
SCHEME_HELP = "auto, iob1, iob2 (BIO), bioes, bmes, or none (plain tags such as POS: no spans)"

# Prefixes per scheme: (begin, inside, end, single).
_PARTS = {
    "iob2": ("B", "I", None, None),
    "iob1": ("B", "I", None, None),
    "bioes": ("B", "I", "E", "S"),
    "bmes": ("B", "M", "E", "S"),
}


class InvalidTagSequence(ValueError):
    """A tag that cannot follow the previous one in its scheme; ``position`` is 0-based."""

    def __init__(self, position: int, tag: str, previous: str | None, scheme: str, reason: str):
        self.position, self.tag, self.previous, self.scheme = position, tag, previous, scheme
        after = f"after {previous!r}" if previous is not None else "at the start of a sentence"
        super().__init__(f"invalid {scheme.upper()} sequence: {tag!r} {after} ({reason})")


def split_tag(tag: str) -> tuple[str, str | None]:
    """``'B-PER'`` -> ``('B', 'PER')``; ``'O'`` -> ``('O', None)``. Types may contain '-'."""
    if tag == "O":
        return "O", None
    prefix, sep, kind = tag.partition("-")
    if not sep or not kind or len(prefix) != 1:
        return tag, None
    return prefix, kind


def check_scheme(scheme: str) -> str:
    scheme = scheme.lower()
    if scheme == "bio":
        scheme = "iob2"
    if scheme not in SCHEMES and scheme != "auto":
        raise UserError(f"unknown tag scheme {scheme!r}; expected {SCHEME_HELP}")
    return scheme


def detect_scheme(sequences: Iterable[Sequence[str]]) -> str:
    """Guess the scheme from the tags: M- means BMES, E-/S- mean BIOES; tags without a
    one-letter prefix mean ``none``; IOB1 when every B- only separates two adjacent
    entities of one type (IOB1's sole use of B-), else IOB2.

    Example:
        >>> detect_scheme([["I-PER", "I-PER", "B-PER", "O"]]), detect_scheme([["B-PER", "I-PER"]])
        ('iob1', 'iob2')
    """
    prefixes: set[str] = set()
    b_after_same = b_total = 0
    for tags in sequences:
        previous = "O"
        for tag in tags:
            prefix, kind = split_tag(tag)
            if tag != "O" and kind is None:
                return "none"
            prefixes.add(prefix)
            if prefix == "B":
                b_total += 1
                b_after_same += split_tag(previous)[1] == kind
            previous = tag
    if not prefixes - {"O"}:
        return "iob2"
    if prefixes - {"O", "B", "I", "M", "E", "S"}:
        return "none"
    if "M" in prefixes:
        return "bmes"
    if prefixes & {"E", "S"}:
        return "bioes"
    if "I" in prefixes and b_total == b_after_same:
        return "iob1"
    return "iob2"


def spans_from_iob2(tags: Sequence[str]) -> list[tuple[str, int, int]]:
    """Entity spans ``(type, start, end)`` (end exclusive) of a valid IOB2 sequence.

    Example:
        >>> spans_from_iob2(["B-PER", "I-PER", "O", "B-LOC"])
        [('PER', 0, 2), ('LOC', 3, 4)]
    """
    spans = []
    start, kind = None, None
    for i, tag in enumerate(list(tags) + ["O"]):
        prefix, tag_kind = split_tag(tag)
        if kind is not None and not (prefix == "I" and tag_kind == kind):
            spans.append((kind, start, i))
            kind = None
        if prefix in ("B", "I") and kind is None:
            start, kind = i, tag_kind
    return spans


def to_iob2(tags: Sequence[str], scheme: str, repair: bool = False) -> tuple[list[str], int]:
    """Convert one sentence's tags to IOB2; return ``(tags, repairs)``.

    Raises :class:`InvalidTagSequence` on the first invalid tag unless ``repair``; repairs
    follow conlleval: a continuation tag that opens nothing starts a new entity, an
    entity left open ends where it stops.
    """
    if scheme == "none":
        return list(tags), 0
    begin, inside, end, single = _PARTS[scheme]
    allowed = {p for p in (begin, inside, end, single) if p} | {"O"}
    out: list[str] = []
    repairs = 0
    open_kind: str | None = None  # the entity type continuing into the next tag (BIOES/BMES: B or I/M seen)
    previous_kind: str | None = None  # IOB1/IOB2: type of the previous tag (None for O)
    for i, tag in enumerate(tags):
        prefix, kind = split_tag(tag)
        prev_tag = tags[i - 1] if i else None
        if prefix not in allowed or (prefix != "O" and kind is None):
            raise InvalidTagSequence(
                i, tag, prev_tag, scheme, f"expected O or {'/'.join(sorted(allowed - {'O'}))}-TYPE tags"
            )
        if scheme in ("iob1", "iob2"):
            if prefix == "O":
                out.append("O")
            elif prefix == "B":
                out.append(tag)
            elif previous_kind == kind:
                out.append(f"I-{kind}")
            else:
                # IOB1: I- opens an entity by design. IOB2: an I- that opens nothing is invalid.
                if scheme == "iob2":
                    if not repair:
                        raise InvalidTagSequence(
                            i, tag, prev_tag, scheme, f"I-{kind} must follow B-{kind} or I-{kind}"
                        )
                    repairs += 1
                out.append(f"B-{kind}")
            previous_kind = kind
            continue
        # BIOES / BMES: B opens, I/M continue, E closes, S is a single-token entity.
        if open_kind is not None and not (prefix in (inside, end) and kind == open_kind):
            if not repair:
                raise InvalidTagSequence(
                    i,
                    tag,
                    prev_tag,
                    scheme,
                    f"the {open_kind} entity opened before is never closed with {end}-",
                )
            repairs += 1
            open_kind = None
        if prefix == "O":
            out.append("O")
        elif prefix in (begin, single):
            out.append(f"B-{kind}")
            open_kind = kind if prefix == begin else None
        elif open_kind == kind:
            out.append(f"I-{kind}")
            open_kind = kind if prefix == inside else None
        else:
            if not repair:
                raise InvalidTagSequence(
                    i, tag, prev_tag, scheme, f"{prefix}-{kind} must follow {begin}-{kind} or {inside}-{kind}"
                )
            repairs += 1
            out.append(f"B-{kind}")
            open_kind = kind if prefix == inside else None
    if open_kind is not None:
        if not repair:
            raise InvalidTagSequence(
                len(tags) - 1 if tags else 0,
                tags[-1],
                tags[-2] if len(tags) > 1 else None,
                scheme,
                f"the sentence ends inside a {open_kind} entity (no {end}- tag)",
            )
        repairs += 1
    return out, repairs


def from_iob2(tags: Sequence[str], scheme: str) -> list[str]:
    """Write a valid IOB2 sequence in ``scheme`` (the inverse of :func:`to_iob2`)."""
    if scheme in ("iob2", "none"):
        return list(tags)
    out = ["O"] * len(tags)
    previous_end: tuple[str, int] | None = None  # (type, end) of the previous entity
    for kind, start, stop in spans_from_iob2(tags):
        if scheme == "iob1":
            adjacent = previous_end == (kind, start)
            out[start] = f"B-{kind}" if adjacent else f"I-{kind}"
            for i in range(start + 1, stop):
                out[i] = f"I-{kind}"
        else:
            begin, inside, end, single = _PARTS[scheme]
            if stop - start == 1:
                out[start] = f"{single}-{kind}"
            else:
                out[start] = f"{begin}-{kind}"
                for i in range(start + 1, stop - 1):
                    out[i] = f"{inside}-{kind}"
                out[stop - 1] = f"{end}-{kind}"
        previous_end = (kind, stop)
    return out


def iob2_labels(types: Iterable[str]) -> list[str]:
    """The IOB2 label set for entity types: ``O`` then ``B-``/``I-`` per type, sorted."""
    return ["O"] + [f"{p}-{t}" for t in sorted(set(types)) for p in ("B", "I")]


def allowed_transitions(labels: Sequence[str]) -> tuple[list[list[bool]], list[bool]]:
    """IOB2 constraints: ``allowed[i][j]`` says label j may follow label i; ``start[j]`` says
    label j may open a sentence. ``I-X`` may only follow ``B-X`` or ``I-X``.

    Example:
        >>> allowed, start = allowed_transitions(["O", "B-PER", "I-PER"])
        >>> allowed[0], start
        ([True, True, False], [True, True, False])
    """
    parts = [split_tag(label) for label in labels]
    allowed = [
        [not (pj == "I" and not (pi in ("B", "I") and ki == kj)) for pj, kj in parts] for pi, ki in parts
    ]
    start = [p != "I" for p, _ in parts]
    return allowed, start
