"""Text matching for hybrid recall, for English, Chinese and Japanese alike.

Text is normalised (Unicode NFKC, case folding, Latin accents removed: "Müller"
matches "Muller"), then cut into terms scored with BM25:

- **words**: runs of letters and digits, stemmed with the Snowball English stemmer
  ("knees" and "knee", "running" and "runs" meet); runs of Chinese or Japanese
  characters, written without spaces, become overlapping character bigrams (a lone
  character stays a unigram), the usual way to index CJK text without a dictionary,
  after traditional Chinese characters are read as simplified ones (`fold_traditional`:
  資料庫 and 资料库 meet, Taiwan's and Hong Kong's writing and the mainland's);
- **near spellings**: the brain's distinct words are indexed by character trigrams;
  a query word also matches the words sharing most of its trigrams (Dice >=
  FUZZY_SIMILARITY), so a small typo ("kubernetse") still finds "kubernetes";
- **initials**: a query word no memory holds matches the memories where a run of
  capitalised words or word parts has it as initials ("DDIA": "Designing Data-Intensive
  Applications", "HPA": "HorizontalPodAutoscaler"); the brain's own text expands it,
  no list of abbreviations;
- **written out**: the other way round, a run of three to five query words whose initials
  a memory writes in capitals ("time to live": "TTLs", "service level objective": "SLO")
  matches the memories writing it.

Pure logic: no I/O. `TextIndex` is built once per brain version.
"""

from __future__ import annotations

import math
import re
import threading
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from itertools import chain

import numpy as np
import opencc
import snowballstemmer

from connector.engine.format.text import STOPWORDS
from connector.engine.format.tokens import CJK_CHARACTERS

# Han (with extensions A and compatibility), Hiragana, Katakana (with the prolonged
# sound mark and halfwidth forms after NFKC), and Hangul syllables.
_CJK = CJK_CHARACTERS
_CJK_RUN = re.compile(f"[{_CJK}]+")
# Han characters (the unified blocks, extension A and the compatibility ideographs): the only
# ones traditional-to-simplified conversion changes.
_HAN = re.compile("[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")
_WORD = re.compile(r"[^\W_]+")
# Combining diacritical marks only: the Japanese (semi-)voiced sound marks
# (U+3099, U+309A) are combining too, and dropping them would change the word.
_ACCENT = re.compile("[\u0300-\u036f]")

_STEMMER = snowballstemmer.stemmer("english")
# A Snowball stemmer keeps its working word in the object: one caller at a time.
_STEMMER_LOCK = threading.Lock()
_STEMS: dict[str, str] = {}
_STEM_MEMO_LIMIT = 500_000

K1 = 1.2
B = 0.75

# Initials: runs of capitalised words (between spaces or hyphens), cut into word parts
# (CamelCase split). One regular expression finds the runs: most words are not capitalised.
_CAPITALISED_RUN = re.compile(r"[A-Z][A-Za-z]*(?:[ \t-]+[A-Z][A-Za-z]*)*")
_PART = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])")
INITIALS = (2, 5)  # how many capitalised parts an abbreviation stands for
# Abbreviations written in capitals ("TTL", "SLOs"), which a query may write out. Not two
# letters: two query words' initials are too often some memory's "IT" or "PR" by chance.
_CAPITALS = re.compile(r"(?<![A-Za-z0-9])([A-Z]{3,5})s?(?![A-Za-z0-9])")
_QUERY_WORD = re.compile(r"[A-Za-z]+")
_BETWEEN_WORDS = re.compile(r"[ \t-]+")


def has_cjk(text: str) -> bool:
    """Whether ``text`` holds Chinese or Japanese (or Korean) characters."""
    return _CJK_RUN.search(unicodedata.normalize("NFKC", text)) is not None


def normalise(text: str) -> str:
    """NFKC, case-folded, Latin accents removed (é -> e, ü -> u, ß -> ss)."""
    folded = unicodedata.normalize("NFKC", text).casefold()
    if folded.isascii():
        return folded
    return unicodedata.normalize("NFC", _ACCENT.sub("", unicodedata.normalize("NFD", folded)))


@lru_cache(maxsize=1)
def _traditional_to_simplified() -> opencc.OpenCC:
    # OpenCC's standard table: characters, and phrases where one traditional character has
    # several simplified ones (乾燥 -> 干燥, 乾隆 stays). ~3 ms to load, on the first Han word.
    return opencc.OpenCC("t2s")


def fold_traditional(text: str) -> str:
    """``text`` with its traditional Chinese characters written as simplified ones (資料庫 ->
    资料库, 學習 -> 学习; simplified text stays as it is), so that a word matches in either
    writing. Japanese kanji that have a simplified form fold too (図書館 -> 図书馆): text is
    folded alike on both sides (memories and queries), so Japanese still meets Japanese."""
    if not _HAN.search(text):
        return text
    return _traditional_to_simplified().convert(text)


def _stem(word: str) -> str:
    stemmed = _STEMS.get(word)
    if stemmed is None:
        with _STEMMER_LOCK:
            stemmed = _STEMMER.stemWord(word)
        if len(_STEMS) < _STEM_MEMO_LIMIT:
            _STEMS[word] = stemmed
    return stemmed


def _cjk_grams(run: str) -> list[str]:
    if len(run) == 1:
        return [run]
    return [run[i : i + 2] for i in range(len(run) - 1)]


def _terms_of_word(word: str) -> tuple[str, ...]:
    if not _CJK_RUN.search(word):
        return (_stem(word),)
    # Folded here, once per distinct word (`_word_terms_memo`): every index build, change and
    # query cuts its words into terms through this function.
    word = fold_traditional(word)
    terms: list[str] = []
    cursor = 0
    for match in _CJK_RUN.finditer(word):
        if match.start() > cursor:
            terms.append(_stem(word[cursor : match.start()]))
        terms.extend(_cjk_grams(match.group()))
        cursor = match.end()
    if cursor < len(word):
        terms.append(_stem(word[cursor:]))
    return tuple(terms)


_WORD_TERMS: dict[str, tuple[str, ...]] = {}


def _word_terms_memo(word: str) -> tuple[str, ...]:
    terms = _WORD_TERMS.get(word)
    if terms is None:
        terms = _terms_of_word(word)
        if len(_WORD_TERMS) < _STEM_MEMO_LIMIT:
            _WORD_TERMS[word] = terms
    return terms


def words_of(text: str) -> list[str]:
    """The normalised words of ``text`` (runs of letters and digits)."""
    return _WORD.findall(normalise(text))


def word_terms(text: str) -> list[str]:
    """Stemmed words and CJK character bigrams (traditional Chinese folded to simplified) of
    ``text``, in order."""
    terms: list[str] = []
    for word in words_of(text):
        terms.extend(_word_terms_memo(word))
    return terms


def query_words_in(query: str, text: str) -> list[str]:
    """The words of ``query`` that ``text`` holds as hybrid recall's word channel reads both
    (`word_terms`: stems, and Chinese or Japanese bigrams), normalised, in the query's order, once
    each: a word whose stem ``text`` holds; in a Chinese or Japanese run, each stretch of
    characters ``text`` holds whole, else its bigrams ``text`` holds (a lone character alone); a run
    of words writing out an abbreviation ``text`` writes in capitals, with it ("time to live (TTL)").
    What a hybrid hit's word channel matched, for a person: the exact engine reads no Chinese."""
    held = set(word_terms(text))  # folded, as the channel reads it: the query's runs are looked up folded too
    plain = fold_traditional(normalise(text))
    found: list[str] = []
    for word in words_of(query):
        cursor = 0
        for match in _CJK_RUN.finditer(word):
            if match.start() > cursor and _stem(word[cursor : match.start()]) in held:
                found.append(word[cursor : match.start()])
            found.extend(_held_stretches(match.group(), held, plain))
            cursor = match.end()
        if cursor < len(word) and _stem(word[cursor:]) in held:
            found.append(word[cursor:])
    written = capitals(unicodedata.normalize("NFKC", text))
    if written:  # "time to live (TTL)": an abbreviation the query writes out, as the channel reads it
        own = set(words_of(query))
        found.extend(f"{normalise(query[run.start : run.end])} ({run.key.upper()})"
                     for run in written_out(query) if run.key in written and run.key not in own)
    return list(dict.fromkeys(found))


def _held_stretches(run: str, held: set[str], plain: str) -> list[str]:
    """The stretches of a Chinese or Japanese ``run`` whose bigrams (its one character, for one)
    are all in ``held``; a stretch ``plain`` does not hold whole is given as its bigrams. Looked up
    with traditional characters folded (`fold_traditional`), named as the query writes them."""
    folded = fold_traditional(run)
    key = folded if len(folded) == len(run) else run  # a conversion that changes the length: as written
    if len(run) == 1:
        return [run] if key in held else []
    stretches: list[tuple[int, int]] = []
    start: int | None = None
    end = 0
    for at in range(len(run) - 1):
        if key[at : at + 2] in held:
            start = at if start is None else start
            end = at + 2
            continue
        if start is not None:
            stretches.append((start, end))
            start = None
    if start is not None:
        stretches.append((start, end))
    return [part for first, last in stretches
            for part in ([run[first:last]] if key[first:last] in plain else _cjk_grams(run[first:last]))]


def initials(text: str) -> dict[str, str]:
    """Abbreviations ``text`` writes out: the initials (lower case) of each run of
    capitalised word parts, and of the run without its first part (a capital that only
    starts a sentence), each with the words it stands for. "Rereading Designing
    Data-Intensive Applications" gives "rddia" and "ddia" (-> "Designing Data-Intensive
    Applications"); "the HorizontalPodAutoscaler" gives "hpa".
    """
    found: dict[str, str] = {}
    low, high = INITIALS
    for phrase in _CAPITALISED_RUN.finditer(text):
        run = list(_PART.finditer(phrase.group()))
        for start in (0, 1):
            size = len(run) - start
            if low <= size <= high:
                key = "".join(match.group()[0].lower() for match in run[start:])
                found.setdefault(key, phrase.group()[run[start].start() : run[-1].end()])
    return found


def capitals(text: str) -> list[str]:
    """Abbreviations ``text`` writes in capitals, three to five letters (a plural "s" aside),
    in lower case, each once: "Lower TTLs before the SLO review" gives ["ttl", "slo"]."""
    return list(dict.fromkeys(match.group(1).lower() for match in _CAPITALS.finditer(text)))


@dataclass(frozen=True)
class WrittenOut:
    """A run of query words that may write out an abbreviation: ``query[start:end]``, whose
    initials are ``key`` (lower case)."""

    start: int
    end: int
    key: str

    def terms(self, query: str) -> frozenset[str]:
        """The terms of the run's words."""
        return frozenset(chain.from_iterable(map(_word_terms_memo, words_of(query[self.start : self.end]))))


def written_out(query: str) -> list[WrittenOut]:
    """Every run of three to five adjacent words of ``query`` (between spaces or hyphens)
    neither starting nor ending with a stopword, longest first: "typical time to live" gives
    "typical time to live" ("tttl") and "time to live" ("ttl"); "saxophone lessons on" none."""
    words = list(_QUERY_WORD.finditer(query))
    runs: list[WrittenOut] = []
    for size in range(5, 2, -1):
        for first in range(len(words) - size + 1):
            run = words[first : first + size]
            if run[0].group().lower() in STOPWORDS or run[-1].group().lower() in STOPWORDS:
                continue
            if not all(_BETWEEN_WORDS.fullmatch(query[a.end() : b.start()]) for a, b in zip(run, run[1:])):
                continue
            runs.append(WrittenOut(run[0].start(), run[-1].end(), "".join(word.group()[0].lower() for word in run)))
    return runs


def trigrams(word: str) -> list[str]:
    """Character trigrams of one (non-CJK) word padded with spaces; none under 3 characters."""
    if len(word) < 3:
        return []
    padded = f" {word} "
    return [padded[i : i + 3] for i in range(len(padded) - 2)]


@dataclass
class Postings:
    """Term -> documents as flat arrays (CSR): term t's entries are [offsets[t], offsets[t+1])."""

    vocabulary: dict[str, int]
    offsets: np.ndarray  # (terms + 1,) int64
    docs: np.ndarray  # int32 document of each entry
    counts: np.ndarray  # float64 occurrences of the term in that document
    lengths: np.ndarray  # float64 terms per document
    count: int

    @classmethod
    def build(cls, documents: Sequence[Sequence[str]]) -> Postings:
        """Postings of ``documents`` (each a sequence of terms), on arrays (no per-term Python loop)."""
        count = len(documents)
        lengths = np.fromiter((len(terms) for terms in documents), dtype=np.int64, count=count)
        every = [term for terms in documents for term in terms]
        vocabulary = {term: number for number, term in enumerate(dict.fromkeys(every))}
        ids = np.fromiter(map(vocabulary.__getitem__, every), dtype=np.int64, count=len(every))
        return cls._of(vocabulary, ids, np.repeat(np.arange(count, dtype=np.int64), lengths), lengths)

    @classmethod
    def of_words(cls, documents: Sequence[Sequence[str]], terms_of: Callable[[str], Sequence[str]]) -> Postings:
        """The postings `build` gives for each document's words cut into terms by ``terms_of``,
        with ``terms_of`` called once per distinct word and each occurrence expanded on arrays
        (a brain repeats its words: 10,000 memories hold ~400,000 words, a few ten thousand distinct)."""
        return cls.of_words_and_words(documents, terms_of)[0]

    @classmethod
    def of_words_and_words(
        cls, documents: Sequence[Sequence[str]], terms_of: Callable[[str], Sequence[str]]
    ) -> tuple[Postings, Postings]:
        """`of_words`, and the postings of the words themselves (word -> documents holding it)."""
        count = len(documents)
        words_per_document = np.fromiter(map(len, documents), dtype=np.int64, count=count)
        every = list(chain.from_iterable(documents))
        numbers = {word: number for number, word in enumerate(dict.fromkeys(every))}
        occurrences = np.fromiter(map(numbers.__getitem__, every), dtype=np.int64, count=len(every))
        cut = [terms_of(word) for word in numbers]
        # Terms numbered in order of first appearance, as `build` numbers them.
        vocabulary = {term: number for number, term in enumerate(dict.fromkeys(chain.from_iterable(cut)))}
        per_word = np.fromiter(map(len, cut), dtype=np.int64, count=len(cut))
        flat = np.fromiter(map(vocabulary.__getitem__, chain.from_iterable(cut)), dtype=np.int64, count=int(per_word.sum()))
        word_owners = np.repeat(np.arange(count, dtype=np.int64), words_per_document)
        if np.all(per_word == 1):  # the usual case: one term per word (CJK runs give several)
            ids, owners = flat[occurrences], word_owners
        else:
            first_term = np.zeros(len(cut) + 1, dtype=np.int64)
            np.cumsum(per_word, out=first_term[1:])
            spans = per_word[occurrences]
            ends = np.cumsum(spans)
            within = np.arange(int(ends[-1]) if len(ends) else 0, dtype=np.int64) - np.repeat(ends - spans, spans)
            ids = flat[np.repeat(first_term[occurrences], spans) + within]
            owners = np.repeat(word_owners, spans)
        lengths = np.bincount(owners, minlength=count).astype(np.int64)
        return cls._of(vocabulary, ids, owners, lengths), cls._of(numbers, occurrences, word_owners, words_per_document)

    @classmethod
    def _of(cls, vocabulary: dict[str, int], ids: np.ndarray, owners: np.ndarray, lengths: np.ndarray) -> Postings:
        """Postings from the term number and the document of every occurrence, in document order."""
        count = len(lengths)
        keys, counts = np.unique(ids * max(count, 1) + owners, return_counts=True)
        term_of = keys // max(count, 1)
        offsets = np.zeros(len(vocabulary) + 1, dtype=np.int64)
        np.cumsum(np.bincount(term_of, minlength=len(vocabulary)), out=offsets[1:])
        docs = (keys % max(count, 1)).astype(np.int32)
        return cls(vocabulary, offsets, docs, counts.astype(np.float64), lengths.astype(np.float64), count)

    def entries(self, term: str) -> tuple[np.ndarray, np.ndarray] | None:
        """Documents holding ``term`` and the counts, or None."""
        number = self.vocabulary.get(term)
        if number is None:
            return None
        start, end = self.offsets[number], self.offsets[number + 1]
        return self.docs[start:end], self.counts[start:end]

    def merged(self, keep: np.ndarray, added: Postings, added_at: np.ndarray) -> Postings:
        """These postings after a change of the documents, equal (up to the numbering of terms)
        to the postings built from scratch over the new documents.

        ``keep``: for each document here, its number among the new documents, or -1 when it
        is gone; increasing over the kept ones (documents keep their order). ``added``: the
        postings of the new or changed documents alone, its document i being new document
        ``added_at[i]``. Terms no document holds any more are dropped, as a build never has
        them. Costs a few passes over the arrays, no sort of the whole.
        """
        count = len(keep) - int(np.count_nonzero(keep < 0)) + len(added_at)
        if len(keep) == 0 or (keep[-1] == len(keep) - 1 and keep[0] == 0 and (not len(added_at) or added_at[0] >= len(keep))):
            # Every document kept where it was (keep is increasing, first and last in place),
            # the new ones after them (a memorize): their entries go at the end of each term's.
            return self._appended(added, np.asarray(added_at, dtype=np.int64), count)
        terms = np.repeat(np.arange(len(self.vocabulary), dtype=np.int64), np.diff(self.offsets))
        moved = keep[self.docs] if len(self.docs) else np.zeros(0, dtype=np.int64)
        kept = moved >= 0
        kept_terms, kept_docs, kept_counts = terms[kept], moved[kept].astype(np.int64), self.counts[kept]
        vocabulary = dict(self.vocabulary)
        added_terms = list(added.vocabulary)  # in number order (numbered by first appearance)
        renumber = np.fromiter((vocabulary.setdefault(term, len(vocabulary)) for term in added_terms),
                               dtype=np.int64, count=len(added_terms))
        new_terms = renumber[np.repeat(np.arange(len(added_terms), dtype=np.int64), np.diff(added.offsets))]
        new_docs = np.asarray(added_at, dtype=np.int64)[added.docs] if len(added.docs) else np.zeros(0, dtype=np.int64)
        span = max(count, 1)
        new_keys = new_terms * span + new_docs
        order = np.argsort(new_keys, kind="stable")
        new_keys, new_counts = new_keys[order], added.counts[order]
        # Kept entries stay sorted by (term, document): documents keep their order.
        at = np.searchsorted(kept_terms * span + kept_docs, new_keys)
        all_terms = np.insert(kept_terms, at, new_keys // span)
        docs = np.insert(kept_docs, at, new_keys % span).astype(np.int32)
        counts = np.insert(kept_counts, at, new_counts)
        per_term = np.bincount(all_terms, minlength=len(vocabulary))
        if np.any(per_term == 0):  # terms only removed documents held: renumber without them
            alive = per_term > 0
            number = np.cumsum(alive) - 1
            spelt = list(vocabulary)
            vocabulary = {spelt[old]: int(number[old]) for old in np.flatnonzero(alive).tolist()}
            per_term = per_term[alive]
        offsets = np.zeros(len(vocabulary) + 1, dtype=np.int64)
        np.cumsum(per_term, out=offsets[1:])
        lengths = np.zeros(count, dtype=np.float64)
        lengths[keep[keep >= 0]] = self.lengths[keep >= 0]
        lengths[np.asarray(added_at, dtype=np.int64)] = added.lengths
        return Postings(vocabulary, offsets, docs, counts, lengths, count)

    def _appended(self, added: Postings, added_at: np.ndarray, count: int) -> Postings:
        """`merged` when the documents here all stay in place and ``added``'s come after them."""
        vocabulary = dict(self.vocabulary)
        added_terms = list(added.vocabulary)
        renumber = np.fromiter((vocabulary.setdefault(term, len(vocabulary)) for term in added_terms),
                               dtype=np.int64, count=len(added_terms))
        new_terms = renumber[np.repeat(np.arange(len(added_terms), dtype=np.int64), np.diff(added.offsets))]
        new_docs = added_at[added.docs] if len(added.docs) else np.zeros(0, dtype=np.int64)
        order = np.lexsort((new_docs, new_terms))
        new_terms, new_docs, new_counts = new_terms[order], new_docs[order], added.counts[order]
        # After the last entry of its term: the added documents are numbered after every kept one.
        ends = np.concatenate([self.offsets[1:], np.full(len(vocabulary) - len(self.vocabulary), self.offsets[-1])])
        at = ends[new_terms]
        docs = np.insert(self.docs, at, new_docs.astype(np.int32))
        counts = np.insert(self.counts, at, new_counts)
        per_term = np.zeros(len(vocabulary), dtype=np.int64)
        per_term[: len(self.vocabulary)] = np.diff(self.offsets)
        per_term += np.bincount(new_terms, minlength=len(vocabulary))
        offsets = np.zeros(len(vocabulary) + 1, dtype=np.int64)
        np.cumsum(per_term, out=offsets[1:])
        lengths = np.zeros(count, dtype=np.float64)
        lengths[: len(self.lengths)] = self.lengths
        lengths[added_at] = added.lengths
        return Postings(vocabulary, offsets, docs, counts, lengths, count)


@dataclass
class Bm25Index:
    """BM25 over one kind of term.

    A posting's weight (its saturated term frequency) depends on the brain's mean document
    length, so every write changes all of them; they are computed per term when a query first
    asks for it (a few terms a query), not for the whole brain at each version (~3 ms at
    10,000 memories, on every write)."""

    postings: Postings
    idf: np.ndarray  # float32 per term
    average: float  # mean document length (1.0 for an empty brain)
    _weights: dict[int, np.ndarray] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def build(cls, documents: Sequence[Sequence[str]]) -> Bm25Index:
        """The index of ``documents`` (each a list of terms)."""
        return cls.of_postings(Postings.build(documents))

    @classmethod
    def of_postings(cls, postings: Postings) -> Bm25Index:
        """The index over ready ``postings``."""
        lengths, count = postings.lengths, postings.count
        average = float(lengths.mean()) if count and lengths.sum() else 1.0
        df = np.diff(postings.offsets)
        idf = np.log(1 + (count - df + 0.5) / (df + 0.5)).astype(np.float32)
        return cls(postings, idf, average)

    def weights_of(self, number: int) -> np.ndarray:
        """The float32 saturated term frequency of each posting of term ``number`` (kept once asked)."""
        found = self._weights.get(number)
        if found is None:
            postings = self.postings
            start, end = postings.offsets[number], postings.offsets[number + 1]
            tf = postings.counts[start:end]
            norm = K1 * (1 - B + B * postings.lengths[postings.docs[start:end]] / self.average)
            found = self._weights[number] = (tf * (K1 + 1) / (tf + norm)).astype(np.float32)
        return found

    def idf_of(self, term: str) -> float:
        """The idf of ``term``; a term no document holds gets the highest idf there can be."""
        number = self.postings.vocabulary.get(term)
        if number is None:
            return float(np.log(1 + (self.postings.count + 0.5) / 0.5))
        return float(self.idf[number])

    def scores(self, query_terms: Sequence[str] | dict[str, float]) -> np.ndarray:
        """BM25 score of every document for the (de-duplicated) ``query_terms``, each
        weighted by its value when a mapping is given."""
        weighted = query_terms if isinstance(query_terms, dict) else dict.fromkeys(query_terms, 1.0)
        postings = self.postings
        slices_docs = []
        slices_weights = []
        for term, factor in weighted.items():
            number = postings.vocabulary.get(term)
            if number is None:
                continue
            start, end = postings.offsets[number], postings.offsets[number + 1]
            slices_docs.append(postings.docs[start:end])
            slices_weights.append(self.weights_of(number) * (self.idf[number] * factor))
        if not slices_docs:
            return np.zeros(postings.count, dtype=np.float32)
        return np.bincount(
            np.concatenate(slices_docs), weights=np.concatenate(slices_weights), minlength=postings.count
        ).astype(np.float32)


@dataclass
class FuzzyWords:
    """The brain's distinct (non-CJK) words, indexed by character trigrams, to find the
    ones a misspelt query word was meant to be (Dice similarity of trigram sets)."""

    stems: list[str]  # stem of each distinct word
    sizes: np.ndarray  # trigrams per word
    grams: Postings  # trigram -> words
    words: list[str] = field(default_factory=list)  # the words themselves (to follow a change)
    # Answers of `similar` by query word: one recall asks for each word two or three times
    # (near-word coverage, fuzzy scores), and queries repeat words. Bounded, cleared when full.
    _memo: dict[str, dict[str, float]] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def build(cls, words: Sequence[str]) -> FuzzyWords:
        """The index of distinct ``words`` (normalised, unstemmed)."""
        kept = [word for word in dict.fromkeys(words) if len(word) >= 3 and not _CJK_RUN.search(word)]
        grams = _trigram_postings(kept)
        sizes = np.diff(np.searchsorted(np.sort(grams.docs), np.arange(len(kept) + 1))).astype(np.float64)
        return cls([_stem(word) for word in kept], sizes, grams, kept)

    def changed(self, gone: set[str], new: Sequence[str]) -> FuzzyWords:
        """These words without ``gone`` and with the distinct ``new`` ones (not held yet): what
        `build` gives for the new word set, up to the numbering of words and trigrams."""
        new = [word for word in dict.fromkeys(new) if len(word) >= 3 and not _CJK_RUN.search(word)]
        keep = np.fromiter((word not in gone for word in self.words), dtype=bool, count=len(self.words))
        numbers = np.where(keep, np.cumsum(keep) - 1, -1).astype(np.int64)
        kept = int(np.count_nonzero(keep))
        added = _trigram_postings(new)
        added_at = np.arange(kept, kept + len(new), dtype=np.int64)
        sizes = np.concatenate([self.sizes[keep], np.bincount(added.docs, minlength=len(new)).astype(np.float64)])
        words = [word for word, held in zip(self.words, keep.tolist(), strict=True) if held] + new
        stems = [stem for stem, held in zip(self.stems, keep.tolist(), strict=True) if held] + [_stem(w) for w in new]
        return FuzzyWords(stems, sizes, self.grams.merged(numbers, added, added_at), words)

    def similar(self, word: str) -> dict[str, float]:
        """Stems of the words sharing at least FUZZY_SIMILARITY of ``word``'s trigrams (Dice), best similarity each."""
        found = self._memo.get(word)
        if found is None:
            found = self._similar(word)
            if len(self._memo) >= _SIMILAR_MEMO:
                self._memo.clear()
            self._memo[word] = found
        return dict(found)

    def _similar(self, word: str) -> dict[str, float]:
        wanted = set(trigrams(word))
        if not wanted or not self.stems:
            return {}
        hits = [found[0] for found in map(self.grams.entries, wanted) if found is not None]
        if not hits:
            return {}
        shared = np.bincount(np.concatenate(hits), minlength=len(self.stems))
        dice = 2 * shared / (len(wanted) + self.sizes)
        result: dict[str, float] = {}
        for number in np.flatnonzero(dice >= FUZZY_SIMILARITY).tolist():
            stem = self.stems[number]
            result[stem] = max(result.get(stem, 0.0), float(dice[number]))
        return result


# Query words whose near spellings are remembered per brain version.
_SIMILAR_MEMO = 4096

# Words up to this long get their trigrams on arrays (one row of code points each); longer
# ones (rare: identifiers, URLs) one by one, so the array stays small.
_ARRAY_WORD = 24


def _trigram_postings(words: Sequence[str]) -> Postings:
    """Postings of each word's distinct `trigrams` (word = document), as `Postings.build` gives
    them up to the order of terms, computed on arrays: a brain has ~20,000 distinct words."""
    short = [number for number, word in enumerate(words) if len(word) <= _ARRAY_WORD]
    long = [number for number, word in enumerate(words) if len(word) > _ARRAY_WORD]
    codes_parts, owners_parts = [], []
    if short:
        points = np.array([words[number] for number in short], dtype=f"<U{_ARRAY_WORD}").view(np.uint32)
        points = points.reshape(len(short), _ARRAY_WORD).astype(np.int64)
        lengths = np.fromiter((len(words[number]) for number in short), dtype=np.int64, count=len(short))
        padded = np.zeros((len(short), _ARRAY_WORD + 2), dtype=np.int64)
        padded[:, 0] = 32
        padded[:, 1:-1] = points
        padded[np.arange(len(short)), lengths + 1] = 32  # " word ": a space after the last letter
        codes = (padded[:, :-2] << 42) | (padded[:, 1:-1] << 21) | padded[:, 2:]  # 21 bits per code point
        valid = np.arange(_ARRAY_WORD)[None, :] < lengths[:, None]  # a word of n letters has n trigrams
        codes_parts.append(codes[valid])
        owners_parts.append(np.repeat(np.asarray(short, dtype=np.int64), lengths))
    for number in long:
        padded_word = [32, *map(ord, words[number]), 32]
        codes_parts.append(np.asarray(
            [(padded_word[i] << 42) | (padded_word[i + 1] << 21) | padded_word[i + 2] for i in range(len(padded_word) - 2)],
            dtype=np.int64,
        ))
        owners_parts.append(np.full(len(padded_word) - 2, number, dtype=np.int64))
    codes = np.concatenate(codes_parts) if codes_parts else np.zeros(0, dtype=np.int64)
    owners = np.concatenate(owners_parts) if owners_parts else np.zeros(0, dtype=np.int64)
    # Distinct (trigram, word) pairs, then trigrams numbered and spelt back once each.
    order = np.lexsort((owners, codes))
    codes, owners = codes[order], owners[order]
    first = np.ones(len(codes), dtype=bool)
    first[1:] = (codes[1:] != codes[:-1]) | (owners[1:] != owners[:-1])
    codes, owners = codes[first], owners[first]
    distinct, ids = np.unique(codes, return_inverse=True)
    mask = (1 << 21) - 1
    letters = np.stack([distinct >> 42, (distinct >> 21) & mask, distinct & mask], axis=1).astype(np.uint32)
    spelt = letters.view("<U3").ravel().tolist() if len(distinct) else []
    lengths = np.bincount(owners, minlength=len(words)).astype(np.int64)
    # Occurrences go in document order, as `Postings._of` expects of its inputs' counts.
    return Postings._of({gram: number for number, gram in enumerate(spelt)}, ids, owners, lengths)


# Dice similarity of trigram sets from which two words count as one misspelt: "kubernetse"
# and "kubernetes" share 0.67, "tab" and "tap" 0.5, unrelated words rarely 0.3.
FUZZY_SIMILARITY = 0.55


def _normalised(scores: np.ndarray) -> np.ndarray:
    top = float(scores.max()) if len(scores) else 0.0
    return scores / top if top > 0 and math.isfinite(top) else np.zeros_like(scores)


@dataclass
class TextIndex:
    """Word BM25 over a brain's memories (in the brain's order), and its words by trigram."""

    words: Bm25Index
    fuzzy: FuzzyWords
    initials: Postings | None = None  # memories by the initials of their capitalised runs
    spelled_out: dict[str, str] | None = None  # those initials -> the words (first seen)
    holders: Postings | None = None  # each distinct word -> the memories holding it (to follow a change)
    capitals: Postings | None = None  # memories by the abbreviations they write in capitals

    @classmethod
    def build(cls, texts: Sequence[str]) -> TextIndex:
        """The index of one text per memory."""
        documents = [words_of(text) for text in texts]
        postings, holders = Postings.of_words_and_words(documents, _word_terms_memo)
        written = [initials(unicodedata.normalize("NFKC", text)) for text in texts]
        spelled_out: dict[str, str] = {}
        for found in written:
            for key, words in found.items():
                spelled_out.setdefault(key, words)
        return cls(
            Bm25Index.of_postings(postings), FuzzyWords.build(list(holders.vocabulary)),
            Postings.build([tuple(found) for found in written]), spelled_out, holders,
            Postings.build([capitals(unicodedata.normalize("NFKC", text)) for text in texts]),
        )

    def changed(
        self, keep: np.ndarray, texts: Sequence[str], added_at: np.ndarray, text_at: Callable[[int], str]
    ) -> TextIndex | None:
        """The index after a change of the memories, answering exactly as `build` over the new
        texts would, at the cost of what changed (plus a few array passes).

        ``keep``: each memory's new position, or -1 when it is gone or its text changed
        (increasing over the kept ones); ``texts``: the new or changed memories' texts, at
        positions ``added_at``; ``text_at(position)``: the text of any memory of the new
        version (read for the few abbreviations whose first writer changed). None when this
        index cannot follow (read from an older cache file): build it instead.
        """
        if self.holders is None or self.initials is None or self.spelled_out is None or self.capitals is None:
            return None
        added_at = np.asarray(added_at, dtype=np.int64)
        documents = [words_of(text) for text in texts]
        added, added_holders = Postings.of_words_and_words(documents, _word_terms_memo)
        holders = self.holders.merged(keep, added_holders, added_at)
        gone: set[str] = set()
        if np.any(keep < 0):  # memories gone or changed: some of their words may be held no more
            gone = {word for word in self.holders.vocabulary if word not in holders.vocabulary}
        new_words = [word for word in added_holders.vocabulary if word not in self.holders.vocabulary]
        fuzzy = self.fuzzy.changed(gone, new_words) if gone or new_words else self.fuzzy
        written = [initials(unicodedata.normalize("NFKC", text)) for text in texts]
        abbreviations = self.initials.merged(keep, Postings.build([tuple(found) for found in written]), added_at)
        # An abbreviation reads as its first writer (in brain order) wrote it out: look again
        # at those the change touched (written by a changed memory or by one that is gone).
        touched = set(chain.from_iterable(written))
        removed = keep[self.initials.docs] < 0 if len(self.initials.docs) else np.zeros(0, dtype=bool)
        if np.any(removed):
            spelt = list(self.initials.vocabulary)
            owners = np.repeat(np.arange(len(spelt)), np.diff(self.initials.offsets))
            touched.update(spelt[number] for number in np.unique(owners[removed]).tolist())
        spelled_out = dict(self.spelled_out)
        by_position = {int(position): found for position, found in zip(added_at.tolist(), written, strict=True)}
        for key in touched:
            held = abbreviations.entries(key)
            if held is None:
                spelled_out.pop(key, None)
                continue
            first = int(held[0][0])
            found = by_position.get(first)
            if found is None:
                found = initials(unicodedata.normalize("NFKC", text_at(first)))
            spelled_out[key] = found[key]
        words = self.words.postings.merged(keep, added, added_at)
        written_in_capitals = self.capitals.merged(
            keep, Postings.build([capitals(unicodedata.normalize("NFKC", text)) for text in texts]), added_at)
        return TextIndex(Bm25Index.of_postings(words), fuzzy, abbreviations, spelled_out, holders, written_in_capitals)

    def reworded(self, query: str) -> str | None:
        """``query`` with its abbreviations spelt out (`spell_out`) and the abbreviations it
        writes out shortened (`shortened`: "typical time to live" -> "typical TTL"), for a
        second embedding; None when neither changes it."""
        return self._reworded(query, lambda key: key.upper())

    def bm25(self, query: str) -> np.ndarray:
        """Word BM25 per memory (raw): of ``query``'s terms, or of the query reworded (as
        `reworded`, an abbreviation shortened in both its singular and its plural, since the
        stemmer keeps "ttls") where that scores higher."""
        scores = self.words.scores(word_terms(query))
        reworded = self._reworded(query, lambda key: f"{key.upper()} {key.upper()}s")
        return scores if reworded is None else np.maximum(scores, self.words.scores(word_terms(reworded)))

    def _reworded(self, query: str, shorten: Callable[[str], str]) -> str | None:
        runs = self.shortened(query)
        for run, _ in sorted(runs, key=lambda found: found[0].start, reverse=True):
            query = query[: run.start] + shorten(run.key) + query[run.end :]
        spelled = self.spell_out(query)
        return spelled if spelled is not None else (query if runs else None)

    def shortened(self, query: str) -> list[tuple[WrittenOut, np.ndarray]]:
        """The runs of ``query``'s words that write out an abbreviation some memory writes in
        capitals (and none of the query's own words is), apart from each other, with the
        memories writing it: "typical time to live" and a memory's "TTLs"."""
        if self.capitals is None or not self.capitals.vocabulary:
            return []
        own = set(words_of(query))
        found: list[tuple[WrittenOut, np.ndarray]] = []
        for run in written_out(query):
            if run.key in own or any(run.start < other.end and other.start < run.end for other, _ in found):
                continue
            held = self.capitals.entries(run.key)
            if held is not None:
                found.append((run, held[0]))
        return found

    def spell_out(self, query: str) -> str | None:
        """``query`` with each abbreviation the brain writes out (and holds nowhere as a
        word) replaced by its words, or None when there is none."""
        changed = False
        pieces = []
        for piece in re.split(r"([^\W_]+)", query):
            word = normalise(piece)
            words = self.spelled_out.get(word) if self.spelled_out and self._expanded(word, _stem(word)) is not None else None
            pieces.append(words if words else piece)
            changed = changed or bool(words)
        return "".join(pieces) if changed else None

    def _expanded(self, word: str, term: str) -> np.ndarray | None:
        """The memories whose capitalised runs have ``word`` as initials, when no memory
        holds the word itself (an abbreviation the brain writes out)."""
        if self.initials is None or term != _stem(word) or not INITIALS[0] <= len(word) <= INITIALS[1]:
            return None
        if not word.isascii() or not word.isalpha() or self.words.postings.entries(term) is not None:
            return None
        found = self.initials.entries(word)
        return None if found is None else found[0]

    def word_scores(self, query: str) -> np.ndarray:
        """Word BM25 per memory, divided by the best (0..1)."""
        return _normalised(self.words.scores(word_terms(query)))

    def word_coverage(self, query: str, *, near: bool = True) -> np.ndarray:
        """Per memory, the share of the query's information it holds (0..1), absolute rather
        than relative to the best memory: a memory matching only a common word scores low
        even when nothing matches better.

        Each distinct query term (stem or CJK bigram) weighs its idf (a term no memory holds
        weighs the highest idf); a memory holds a term fully when it has the term, and by
        the Dice similarity of the nearest spelling it has otherwise (a typo; only when
        ``near``).
        """
        count = self.words.postings.count
        held = np.zeros(count, dtype=np.float64)
        total = 0.0
        seen: set[str] = set()
        shortened = [(run.terms(query), writers) for run, writers in self.shortened(query)]
        for word in words_of(query):
            for term in _word_terms_memo(word):
                if term in seen:
                    continue
                seen.add(term)
                weight = self.words.idf_of(term)
                total += weight
                best = np.zeros(count, dtype=np.float64)
                spellings = self.fuzzy.similar(word) if near and len(word) >= 3 and term == _stem(word) else {}
                for stem, similarity in ((term, 1.0), *spellings.items()):
                    found = self.words.postings.entries(stem)
                    if found is not None:
                        np.maximum.at(best, found[0], similarity)
                expanded = self._expanded(word, term)
                if expanded is not None:
                    best[expanded] = 1.0
                for terms, writers in shortened:
                    if term in terms:
                        best[writers] = 1.0
                held += weight * best
        if total <= 0:
            return np.zeros(count, dtype=np.float32)
        return (held / total).astype(np.float32)

    def fuzzy_scores(self, query: str) -> np.ndarray:
        """Word BM25 of the brain's words closest in spelling to each query word,
        weighted by that closeness, divided by the best (0..1)."""
        expanded: dict[str, float] = {}
        for word in words_of(query):
            for stem, similarity in self.fuzzy.similar(word).items():
                expanded[stem] = max(expanded.get(stem, 0.0), similarity)
        # In stem order: the sum's order then does not depend on how the words are numbered
        # (a followed index numbers them otherwise than a build, see `changed`).
        return _normalised(self.words.scores(dict(sorted(expanded.items()))))
