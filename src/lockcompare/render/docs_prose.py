"""The prose-number check: a figure in the docs' prose must be rendered from a committed file, so
every number outside a rendered block, a code span or fence, a link target or an HTML comment must
be explained by the short allow-list :data:`ALLOWED` (settings of the lesson's lab, versions, names
that carry a number) or it is reported (render/docs.py ``--check``)."""

from __future__ import annotations

import re

#: Numbers in prose that are not results: the lesson lab's settings and defaults, versions, commands,
#: section numbering. Each is a pattern with the word or unit that makes it a setting, and why; a
#: number matched by none of them is a figure and must come from a block. Keep this list short: a
#: result that fits one of these patterns by accident is still a result, so a new pattern names the
#: setting, never a bare number.
ALLOWED: tuple[tuple[str, str], ...] = (
    (
        # Never "19 trials of 20": a count of some trials out of others is a result (issue 42).
        r"\b\d+\s(?:workers?|rounds?|(?:lock )?nodes?|trials?|jobs|cores?|threads?|CPU hogs?)\b(?!\s+of\s+\d)",
        "the lab's size and a run's shape: 2 workers, 40 rounds, 5 nodes, 5 trials",
    ),
    (
        r"\b(?:TTL|lease|paused?|work|timeouts?|delay|jumps?|think time|margin|offset|every|of every|default)"
        r"\s(?:of |is |= |> |< )?(?:about )?\d+(?:\.\d+)?(?: ?(?:ms|s)\b)?",
        "a setting named before its value: TTL 1000 ms, work 300, a pause of 1200 ms",
    ),
    (
        r"\b\d+(?:\.\d+)? ?(?:ms|s)\b(?=\s(?:of work|of (?:every|pause)|TTL|lease|pause|work|timeout|delay"
        r"|(?:clock )?jump|sleep|after|into|margin|allowance|interval|window|limit|strobe|stop))",
        "a duration that says what it sets: 300 ms of work, 50 ms after each acquire, a 250 ms margin",
    ),
    (
        r"\b\d+ [−-] \d+ ms\b|\b\d+ ?[/x×] ?TTL\b|\bTTL ?/ ?\d+\b|\bwork ?/ ?\d+\b|[×x] ?\d+(?:\.\d+)?\b",
        "the margins' and faults' formulas (1000 − 300 ms, 2 x TTL, TTL/10, work/2) and time scales (×0.1)",
    ),
    (
        r"(?i:\b(?:python|postgresql|redis|etcd|schema|version|utf)[ -]?[≥>=]*\s?\d+(?:\.\d+)*\b)|\b\d+(?:\.\d+){2,}\b",
        "versions, encodings and addresses: Python ≥ 3.11, schema 7, UTF-8, 127.0.0.1",
    ),
    (r"^#{1,6} .*$|^\s*\d+\.\s", "headings and numbered lists"),
    (
        r"(?i:\b(?:issue|round|step|port|pid|node|nodes|worker|trial|token|exits?|exit codes?|mode|line|run)"
        r"[\s-]?#?\d+(?:(?:, ?| and )\d+)*\b)|#\d+\b",
        "names that carry a number: worker 0, nodes 3,4, token 1, issue 31, trial #3, exit code 2, mode 0600",
    ),
    (
        r"\b\d+-(?:node|worker|core|second|bit|byte)\b|\b[357] of (?:the )?[57]\b|\bK [<>]=? \d(?: of \d)?\b|\bK-1\b",
        "the quorum and set-up of the lab: 2-core, 3 of 5, K < 3",
    ),
    (
        r"^\|\s*`[^`|]*--[^`|]*`[^|]*\|.*$|^\|.*`LOCKCOMPARE_MAX_\w+`.*$",
        "a table row of settings (its first cell an option, or a limit's variable): limits, defaults",
    ),
    (
        r"\bat\s+most\s+\d+(?: \d{3})*\s+(?:steps|characters|bytes|MB|KB)\b",
        "a limit in prose: at most 64 steps, at most 8 192 characters",
    ),
    (
        r"(?:/ ?|\bof )(?:80|40)\b|\bbalance \+ 1\b|\b[A-E] [=>] 0\b|\b95% (?:interval|CI)\b",
        "the lab's 80 planned entries (2 workers × 40 rounds), the write's + 1, the lesson's pattern (B = 0), 95% CI",
    ),
    (r"\b[0-9a-f]*[a-f][0-9a-f]*\b|\b[0-9a-f]{7,40}\b", "revisions and trial ids (hex)"),
)

#: Each pattern is matched on its own, so one that starts earlier cannot hide another's match.
_ALLOWED = [re.compile(pattern, re.MULTILINE) for pattern, _ in ALLOWED]

#: Everything in a file that is not prose: rendered blocks, code fences and spans, HTML comments,
#: link targets and image paths. Removed (replaced by spaces, so lines keep their numbers) before
#: numbers are looked for.
_NOT_PROSE = re.compile(
    "|".join(
        (
            r"<!-- (value|table|excerpt|output|words): .*?<!-- /\1 -->",  # a rendered block
            r"<!-- faultkinds -->.*?<!-- /faultkinds -->",
            r"<!-- verdicts -->.*?<!-- /verdicts -->",
            r"^```.*?^```[^\n]*$",  # a fenced code block
            r"<!--.*?-->",  # an HTML comment (a marker, or a note for the maintainers)
            r"`[^`\n]+`",  # a code span
            r"\]\([^)\s]+\)",  # a link's or image's target
            r"<https?://[^>]+>|https?://\S+",  # a bare address
        )
    ),
    re.DOTALL | re.MULTILINE,
)

_NUMBER = re.compile(r"(?<![\w.])[-−+]?\d+(?:[.,]\d+)*(?:\s?±\s?\d+(?:\.\d+)?)?%?(?![\w])")


def prose_numbers(markdown: str) -> list[tuple[int, str]]:
    """Every number in ``markdown``'s prose outside a rendered block, a code span or fence, a link
    target or an HTML comment that no pattern of ``ALLOWED`` explains, as (line, number).

    >>> prose_numbers("TTL 1000 ms, 2 workers; single lost 19.8 updates (`--trials 5`)\\n")
    [(1, '19.8')]
    >>> prose_numbers("lost <!-- value: r.csv rows -->5<!-- /value --> of 81 entries\\n```\\n42\\n```\\n")
    [(1, '81')]
    """
    covered = bytearray(len(markdown))  # 1 where a character is not prose or is an allowed setting

    def cover(pattern: re.Pattern[str], text: str) -> None:
        for match in pattern.finditer(text):
            covered[match.start() : match.end()] = b"\1" * (match.end() - match.start())

    cover(_NOT_PROSE, markdown)
    prose = "".join(" " if c and ch != "\n" else ch for c, ch in zip(covered, markdown, strict=True))
    for allowed in _ALLOWED:
        cover(allowed, markdown)  # the original: a settings row is known by its first cell's code span
        cover(allowed, prose)
    return [
        (markdown.count("\n", 0, m.start()) + 1, m.group(0))
        for m in _NUMBER.finditer(markdown)
        if not any(covered[m.start() : m.end()])
    ]
