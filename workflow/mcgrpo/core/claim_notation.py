"""Reading written work as arithmetic, character for character: the step before a claim is parsed.

`read(text)` returns a string of the same length (so a claim's characters are its characters in the
text) in which what is no arithmetic is blanked and every separator between two numbers is decided:

- labels before a claim (`1)`, `(a)`, `ii.`, `Step 2:`, `- ` bullets) end it: a label is no operand;
- Markdown emphasis (`**2 + 3 = 5**`) and LaTeX display delimiters (`\\[ \\]`) are blanked;
- degrees after a number (`70°`, `70^\\circ`) are blanked, and a unit word after a space (`35 dollars`,
  `12 cm`, `\\text{ kg}`) where an operator follows it or `=` ends a computed side: the claim is about
  the number (GSM8K's reference steps `<<3*5=15>>` carry no units). Before `=` after a bare number a unit
  is a conversion (`2 kg = 2 * 1000 g`) and stays a word; so do clause words (`because`, `is`), glued
  letters (`3xyz`, `4ac`: variables) and single letters (`3x + 7 = 10` stays no claim);
- `percent` is `%`, and `p% of x` is `p% × x`; currencies `€ £ ¥ ₹` are `$`; `[ ]` group as `( )`;
- a separator between two numbers (`_separate`) joins them (`1 000`, `1,000`, `1\\,000`, `2 1/2`), splits
  two claims side by side (`0+72=72 0+72=72`, `5-2=3,4*3=12`), or has two readings and is marked
  unreadable (`2,5`: a decimal comma or a list; `=1 500 500+`: which claim the group `500` belongs to),
  so a claim holding it is left unjudged rather than judged on a fragment.

The papers (seeds 001, 003) define a claim as an intermediate calculation checked against a value; they
are silent on notation. What has one reading is read; what has two is left unjudged (seed 003: penalize
only what is verifiable).
"""

from __future__ import annotations

import bisect
import re
from fractions import Fraction

UNREADABLE = "\ufffd"  # a separator with two readings: no side holding it parses, so its claim is unjudged
_THIN = "\u2009\u202f\u00a0'’"  # thin, narrow no-break, no-break spaces, apostrophes (1'000): digit grouping only
_SPACES = _THIN[:3]
VULGAR = "½⅓⅔¼¾⅕⅖⅗⅘⅙⅚⅛⅜⅝⅞"

# What written arithmetic is made of; a run of these holding `=` is a chain of claims once `_separate` has
# split it. Each alternative starts on a different character, so a run is matched in linear time.
RUN = re.compile(r"(?:\\(?:times|cdot|div|[dt]?frac|sqrt|left|right|overline|\$|,|!|%|\{|\})|sqrt(?=\()"
                 rf"|(?<=\d)\{{,\}}(?=\d)|[0-9.+\-*/×·÷−√⁄()=${{}}^% \t{_SPACES}{VULGAR}{UNREADABLE}]"
                 r"|(?<=\d)[,'’](?=\d))+")
_OPERAND_START = "0123456789$(-−+\\√"
_OPERAND_END = "0123456789.)}%"
_OPERATORS = "+-−×·÷/*^"
_PUNCTUATION = ".,;:!?()[]{}\"'"

# --- what is no arithmetic: blanked, the length kept ----------------------------------------------
_TIMES_X = re.compile(r"(?<=[\d)])( ?)x( ?)(?=[\d(])")  # `3 x 4`: a multiplication, not a variable
_STARS = re.compile(r"\*+")
_DELIMITERS = re.compile(r"\\[\[\]()]")  # \[ \] \( \): LaTeX math delimiters
# A label: at the start of a line or after `:`, `;` or `,`, a bullet and/or an enumerator (`1)`, `(1)`,
# `a.`, `ii)`, `[3]`, `Step 2:`, `Step 10.`), then a space and an operand; a bare bullet likewise
# (CommonMark: `- ` at a line's start is a list item, so `- 3 + 4 = 7` is 3 + 4, not -3 + 4).
_ENUMERATOR = r"(?:[A-Za-z]+[ \t]+)?(?:\(\w{1,4}\)|\[\w{1,4}\]|\w{1,4}[.):])"
_LABEL = re.compile(rf"(?:^|(?<=[:;])|(?<=,)(?=[ \t]))[ \t]*(?:[-*+•](?:[ \t]+{_ENUMERATOR})?|{_ENUMERATOR})"
                    r"(?=[ \t]+(?:[\d$(\[\\√.]|[-−+]\S))", re.M)
# mid-line: `(b)`, `b)`, and `(2)`, `2)` after a number (`=8 (2) 8*2=16`); after an operator or a word
# (`\times 0) 3`) a parenthesis of the expression
_INLINE_LABEL = re.compile(r"(?:(?<![\w)])\([A-Za-z]{1,4}\)|(?<![\w(])[A-Za-z]{1,4}\)|(?<=[\d.,;:][ \t])\(?\d{1,3}\))"
                           r"(?=[ \t]+[\d$(\[\\√.-])")
_PERCENT_WORD = re.compile(r"(?<=\d)[ \t]?(?:percent|per cent)\b")
_OF = re.compile(r"(?<=%)[ \t]+of(?=[ \t]+[\d$(\[\\√])")  # 10% of 200
_POWER = r"(?:\^\{?[23]\}?|[²³])?"  # cm^2, m³
# a word unit: two letters or more, not `of` (10% of), `sqrt` or a word that starts a clause
# (`because - 18/-2`); `km/h`, `dollars per hour`, `$5 per hour`, `cubic feet`, `two-inch`
_HYPHENED = r"(?:[-'’][A-Za-z]*)*"  # two-inch, hours'
_PROSE = (r"(?!(?:of|sqrt|and|or|so|because|since|then|thus|hence|therefore|is|are|was|were|which|that|to|by"
          r"|if|but)\b)")
_WORD_UNIT = (rf"(?:per[ \t])?{_PROSE}[A-Za-z]{{2,}}{_HYPHENED}"
              rf"(?:(?:[ \t]?/[ \t]?|[ \t]per[ \t]|[ \t](?!of\b))[A-Za-z]+{_HYPHENED})?")
_DEGREE = re.compile(r"(?<=\d)(?:[ \t]|\\,)?(?:°|\^?\{?\\circ\}?|\\degree)(?:[ \t]?[CFK](?![A-Za-z]))?")
_UNIT = re.compile(rf"(?<=\d)[ \t]?\\(?:text|mathrm|textrm|mbox)\{{[ \t]*[A-Za-z][A-Za-z .]*\}}{_POWER}"
                   rf"|(?<=\d)[ \t]{_WORD_UNIT}{_POWER}(?![A-Za-z])")  # `3xyz`, `4ac`: variables, no unit
_BARE = re.compile(r"[ \t]*[$]?\d+(?:\.\d+)?(?:/\d+)?[ \t]*")  # a number or a fraction: computes nothing
_EN_DASH = re.compile(r"(?<=[\d)%])([ \t]*)–(?=[ \t]*[\d($])")  # `240 – 224`: a minus between operands
_CURRENCY = str.maketrans("€£¥₹[]", "$$$$()")

# --- separators between two numbers ---------------------------------------------------------------
_GAP = re.compile(rf"(?<=[\d.])(?:[ \t]+|[{_THIN}]|\\,|\{{,\}}|,)(?=[\d$])")
# a mixed number's fraction: `2 1/2`, also before a full stop (`= 3 1/2.`); before decimals (`3 1/2.5`) two readings
_PROPER = re.compile(r"([1-9]\d*)/(\d+)(?!\d|\.\d)")
_PROPER_DECIMAL = re.compile(r"([1-9]\d*)/(\d+)\.\d")
_THOUSANDS = re.compile(r"\d{3}(?!\d)")
_SEPARATORS = rf"(?:[ \t{_THIN}]|\\,|\{{,\}}|,)"
# a grouped number: `1 000 000`, or the decimals of `3.141 592` (SI groups them too), one separator throughout
_GROUPED = re.compile(rf"(?:(?<![\d.,])\d{{1,3}}|(?<=\d\.)\d{{3}})"
                      rf"(?P<sep>{_SEPARATORS})\d{{3}}(?:(?P=sep)\d{{3}})*(?!\d)")
_WINDOW = 64  # how far back a digit group is looked for (a number longer than this is no written step)


def read(text: str) -> str:
    """`text`, same length, with what is no arithmetic blanked and each separator decided (module doc)."""
    out = _TIMES_X.sub(lambda m: f"{m[1]}×{m[2]}", text)
    out = _PERCENT_WORD.sub(lambda m: "%".rjust(len(m[0])), out)
    out = _OF.sub(lambda m: " ×".ljust(len(m[0])), out)
    out = _DEGREE.sub(lambda m: " " * len(m[0]), out)
    out = _UNIT.sub(_unit, out)  # before emphasis: `3 cm * 4 cm` multiplies
    out = _STARS.sub(_emphasis, out)
    out = _EN_DASH.sub(lambda m: f"{m[1]}−", out)
    out = _DELIMITERS.sub("  ", out)
    out = _LABEL.sub(_ends_claim, out)
    out = _INLINE_LABEL.sub(_ends_claim, out)
    return _separate(out.translate(_CURRENCY))


_NUMBER = re.compile(r"-?\d+(?:,\d{3})*(?:\.\d+)?")  # a written number: `1,200` (and `1{,}200`) one number


def numbers(text: str, start: int = 0) -> list[Fraction]:
    """The numbers written in `text` from `start` on, exact: what a problem gives or a later step uses (path
    penalty's obligations). A grouped number (`1,200`, `1{,}200`) is one."""
    return [Fraction(n.replace(",", "")) for n in _NUMBER.findall(text.replace("{,}", ","), start)]


def ungroup(side: str) -> str:
    """A side with its digit-group separators dropped (`1 000`, `1,000`, `1{,}000`, `1\\,000`: 1000)."""
    return _GROUPED.sub(lambda m: re.sub(_SEPARATORS, "", m[0]), side)


def _unit(word: re.Match) -> str:
    """A word after a number is its unit, blanked, where an operator follows (`3 cm + 4 cm`), or `=` ends
    a computed side (`3 * 5 dollars = 15`). Before `=` after a bare number it is a conversion, no
    arithmetic (`2 kg = 2 * 1000 g`), and elsewhere prose (`$500 is (2/5)*$500`): both stay words."""
    text, start, end = word.string, word.start(), word.end()
    following = text[end:end + 40].lstrip(" \t")[:1]
    if following and following in "+-*/×·÷−–":
        return " " * len(word[0])
    side = re.split(r"[=\n]|[A-Za-z]", text[max(0, start - 80):start])[-1]
    computed = following == "=" and not _BARE.fullmatch(side) and any(op in side for op in _OPERATORS + "–")
    return " " * len(word[0]) if computed else word[0]


def _ends_claim(label: re.Match) -> str:
    return "\n" * len(label[0])


def _emphasis(stars: re.Match) -> str:
    """Markdown emphasis is blanked: stars flanking a text, as CommonMark has it (`**2 + 3 = 5**`,
    `= **5**`). Stars between two operands are an operator (`3 * 4`, `2 ** 3`, `2 pounds * 3`); beside an
    operator a mistake (`2 + * 3`); spaced or inside a word a product (`ft * 3/4`, `X*2`): these stay."""
    text, start, end = stars.string, stars.start(), stars.end()
    before = text[max(0, start - 40):start].rstrip(" \t")[-1:]  # the nearest, past blanked units
    after = text[end:end + 40].lstrip(" \t")[:2]
    after = after[1:] if after[:1] == "." else after[:1]  # `20*.2`: a decimal; `**5**.`: a full stop
    operator = bool(before) and before in _OPERAND_END and bool(after) and after in _OPERAND_START
    beside = bool(before) and before in _OPERATORS or bool(after) and after in _OPERATORS
    left, right = text[start - 1:start] or " ", text[end:end + 1] or " "
    if left.isalpha() or right.isalpha():  # `X*(1 + 2)`, `**Step`: a word's product, or outside any run
        return stars[0]
    flanking = left.isspace() != right.isspace() or (left in _PUNCTUATION) != (right in _PUNCTUATION)
    return " " * len(stars[0]) if flanking and not (operator or beside) else stars[0]


def _separate(text: str) -> str:
    """Each separator between two numbers in a run: kept (it joins them), a line break (two claims side
    by side) or UNREADABLE (two readings)."""
    out = list(text)
    for run in RUN.finditer(text):
        equals = [m.start() for m in re.finditer("=", run[0])]
        if not equals:
            continue
        start = run.start()
        for gap in _GAP.finditer(text, run.start(), run.end()):
            first = bisect.bisect_left(equals, start - run.start())
            between = (first < len(equals) and equals[first] + run.start() < gap.start()
                       and equals[-1] + run.start() >= gap.end())
            kind = _kind(text, gap, between)
            if kind == "split":
                out[gap.start():gap.end()] = "\n" * len(gap[0])
                start = gap.end()
            elif kind == "unreadable":
                out[gap.start():gap.end()] = UNREADABLE * len(gap[0])
    return "".join(out)


def _kind(text: str, gap: re.Match, between: bool) -> str:
    """"join", "split" or "unreadable", for a separator between two numbers; `between`: whether it sits
    between two equations of its run (the only place a list or a second claim can start)."""
    separator = gap[0]
    grouped = _grouped(text, gap)
    if separator == ",":  # thousands (`1,200`), a list (`5-2=3,4*3=12`), else a decimal comma or a list
        return "join" if grouped else "split" if between else "unreadable"
    if separator.strip(" \t"):  # thin spaces, `\,`, `{,}`: grouping only
        return "join" if grouped else "unreadable"
    fraction = _PROPER.match(text, gap.end())
    mixed = len(separator) == 1 and fraction is not None and int(fraction[1]) < int(fraction[2])
    decimal = _PROPER_DECIMAL.match(text, gap.end())
    if len(separator) == 1 and decimal is not None and int(decimal[1]) < int(decimal[2]):
        return "unreadable"  # `= 3 1/2.5`: 3 and a fraction's decimals, or a mixed number misspelt
    if mixed and grouped:  # `1 250/500`: 1250/500 or 1 + 250/500
        return "unreadable"
    if mixed:
        return "join"
    if grouped:  # `1 000 + 500 = 1 500`; `=72 100+20=`: the end of one claim or the start of the next
        return "unreadable" if between else "join"
    return "split"


def _grouped(text: str, gap: re.Match) -> bool:
    """Whether the separator lies inside one digit-grouped number (the same separator throughout)."""
    if not _THOUSANDS.match(text, gap.end()):
        return False
    origin = max(0, gap.start() - _WINDOW)
    window, at = text[origin:gap.end() + 4], gap.start() - origin
    return any(m.start() < at < m.end() for m in _GROUPED.finditer(window))
