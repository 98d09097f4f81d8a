"""An offline guess at whether a text is written in a given language (ISO 639-1 code).

Why our own: IFEval checks the response language with `langdetect`, which is not installed here
and whose results vary with its random seed; a small deterministic heuristic is enough to reward
"answer in Korean" and to catch an answer in the wrong language.

How: first the writing system. The letters of the text are sorted by Unicode block, and the
language's script must hold at least half of them. Then, among the languages sharing that script,
distinctive letters and a few very common words decide, sentence by sentence: a sentence votes
for the language whose common words and letters it holds the most *distinct* ones of (no vote
on a tie), with the weight of its word count, and the asked-for language must get at least as
much weight as every other language of its script. Distinct, and by sentence, because a
verifier is an attack surface: counting every occurrence over the whole text let an English
answer pass as Spanish, French and Italian at once by ending with " la" fourteen times. Now it
takes more words of the language's own than of another's.

Limits, on purpose on the lenient side: with no evidence either way (a short text, no common
words) any language of the right script passes, so "OK" passes as Spanish. Hindi, Marathi and
Nepali (all Devanagari) are told apart only by a handful of function words. Languages outside
IFEval's list raise ValueError. A text in the right language with many English terms can fail.
"""

from __future__ import annotations

from collections import Counter

from rlvr.rewards.ifeval.text import split_sentences, split_words

# script -> inclusive code-point ranges
_SCRIPT_RANGES: dict[str, tuple[tuple[int, int], ...]] = {
    "latin": ((0x41, 0x5A), (0x61, 0x7A), (0xC0, 0x24F), (0x1E00, 0x1EFF)),
    "cyrillic": ((0x400, 0x4FF),),
    "greek": ((0x370, 0x3FF),),
    "hebrew": ((0x590, 0x5FF),),
    "arabic": ((0x600, 0x6FF), (0x750, 0x77F), (0xFB50, 0xFDFF), (0xFE70, 0xFEFF)),
    "devanagari": ((0x900, 0x97F),),
    "bengali": ((0x980, 0x9FF),),
    "gurmukhi": ((0xA00, 0xA7F),),
    "gujarati": ((0xA80, 0xAFF),),
    "tamil": ((0xB80, 0xBFF),),
    "telugu": ((0xC00, 0xC7F),),
    "kannada": ((0xC80, 0xCFF),),
    "malayalam": ((0xD00, 0xD7F),),
    "thai": ((0xE00, 0xE7F),),
    "kana": ((0x3040, 0x30FF),),
    "han": ((0x3400, 0x4DBF), (0x4E00, 0x9FFF)),
    "hangul": ((0x1100, 0x11FF), (0x3130, 0x318F), (0xAC00, 0xD7AF)),
}

# language -> the scripts its letters may come from (Japanese mixes kana and kanji)
_LANGUAGE_SCRIPTS: dict[str, tuple[str, ...]] = {
    **{code: ("latin",) for code in ("en", "es", "pt", "fr", "de", "it", "pl", "vi", "sw", "fi")},
    **{code: ("cyrillic",) for code in ("ru", "uk", "bg")},
    **{code: ("arabic",) for code in ("ar", "fa", "ur")},
    **{code: ("devanagari",) for code in ("hi", "mr", "ne")},
    "bn": ("bengali",), "pa": ("gurmukhi",), "gu": ("gujarati",), "ta": ("tamil",),
    "te": ("telugu",), "kn": ("kannada",), "ml": ("malayalam",), "th": ("thai",),
    "he": ("hebrew",), "ko": ("hangul",), "ja": ("kana", "han"), "zh": ("han",),
    "el": ("greek",),
}

# Very common words, chosen to overlap little between languages of one script.
_COMMON_WORDS: dict[str, frozenset[str]] = {code: frozenset(words.split()) for code, words in {
    "en": "the and is are of to in that it with for this was you have be not on as they",
    "es": "el la los las de que y en es por para con una del se no lo como más pero",
    "pt": "o os de que e em é um uma do da não para com por se mais você são",
    "fr": "le la les de des et est en un une du que pour dans ne pas qui sur avec vous",
    "de": "der die das und ist nicht ein eine zu mit den von auf für sich es ich sie auch dem",
    "it": "il la di che e è un una per non con del della sono gli le si da anche",
    "pl": "i w nie na się z że jest do to jak o ale co czy od po tak",
    "vi": "và của là có không được những các cho một trong người với này đã",
    "sw": "na ya wa kwa ni za la katika hii kama hiyo lakini sana pia",
    "fi": "ja on ei se että hän oli ovat mutta kun tai myös ole kuin niin",
    "hi": "है हैं का की के में और से यह",
    "mr": "आहे आणि आहेत या हे ते",
    "ne": "छ छन् र हो यो गर्न",
    "ru": "это что он как так его только было",
    "uk": "це що як та які він але було",
    "bg": "е са това които което ще съм",
    "ar": "في من على إلى أن هذا التي الذي",
    "fa": "است را از در این برای",
    "ur": "ہے ہیں میں کے کی اور",
}.items()}

# Letters one language of a script uses and its neighbours do not.
_DISTINCTIVE_LETTERS: dict[str, str] = {
    "uk": "іїєґ", "ru": "ыэё", "bg": "ѝ",
    # Urdu writes Persian's letters too, plus its own: it gets both sets.
    "ar": "\u0629\u0649\u064a\u0643", "fa": "\u067e\u0686\u0698\u06af\u06cc\u06a9",
    "ur": "\u0679\u0688\u0691\u06ba\u06d2\u06be\u067e\u0686\u06af\u06cc\u06a9",
}

_MIN_SCRIPT_SHARE = 0.5


def supported_languages() -> tuple[str, ...]:
    return tuple(sorted(_LANGUAGE_SCRIPTS))


def is_language(text: str, code: str) -> bool:
    """True if `text` reads as language `code` (see the module docstring for the rules)."""
    scripts = _LANGUAGE_SCRIPTS.get(code)
    if scripts is None:
        raise ValueError(f"language {code!r} is not one of {', '.join(supported_languages())}")
    counts = _script_counts(text)
    letters = sum(counts.values())
    if letters == 0:
        return False
    own = sum(counts.get(s, 0) for s in scripts)
    if own / letters < _MIN_SCRIPT_SHARE:
        return False
    if code == "ja" and counts.get("kana", 0) == 0:
        return False  # kanji alone reads as Chinese
    if code == "zh" and counts.get("kana", 0) > 0.05 * own:
        return False
    rivals = [other for other, s in _LANGUAGE_SCRIPTS.items() if s == scripts]
    if len(rivals) == 1:
        return True
    weights = Counter()
    for sentence in split_sentences(text) or [text]:
        words = split_words(sentence.lower())
        scores = {lang: _evidence(sentence, words, lang) for lang in rivals}
        top = max(scores.values())
        winners = [lang for lang, score in scores.items() if score == top]
        if top > 0 and len(winners) == 1:
            weights[winners[0]] += len(words)
    return weights[code] >= max(weights.values(), default=0)


def _evidence(sentence: str, words: tuple[str, ...], code: str) -> int:
    """How many distinct common words and distinctive letters of language `code` the sentence
    holds (`words`: its words, lowercased)."""
    score = len(_COMMON_WORDS.get(code, frozenset()).intersection(words))
    return score + sum(1 for ch in _DISTINCTIVE_LETTERS.get(code, "") if ch in sentence)


def _script_counts(text: str) -> dict[str, int]:
    # Classify each distinct character once: a 100 KB answer holds a few hundred distinct ones,
    # and the range scan per character would dominate the check.
    counts: dict[str, int] = {}
    for ch, times in Counter(text).items():
        if not ch.isalpha():
            continue
        point = ord(ch)
        for script, ranges in _SCRIPT_RANGES.items():
            if any(lo <= point <= hi for lo, hi in ranges):
                counts[script] = counts.get(script, 0) + times
                break
    return counts
