"""Text matching for hybrid recall, for English, Chinese and Japanese alike.

Text is normalised (Unicode NFKC, case folding, Latin accents removed: "Müller"
matches "Muller"), then cut into two kinds of terms, each scored with BM25 on its
own index:

- **words**: runs of letters and digits, stemmed with the Snowball English stemmer
  ("ran"/"runs"/"running" stay apart only where Snowball keeps them apart); runs of
  Chinese or Japanese characters, written without spaces, become overlapping
  character bigrams (a lone character stays a unigram), the usual way to index CJK
  text without a dictionary;
- **trigrams**: character trigrams of each (unstemmed) Latin word, padded with
  spaces, so a small typo ("kuberentes") still shares most of its terms.

Pure logic: no I/O. `TextIndex` is built once per brain version.
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import snowballstemmer

# Han (with extensions A and compatibility), Hiragana, Katakana (with the prolonged
# sound mark and halfwidth forms after NFKC), and Hangul syllables.
_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af"
_CJK_RUN = re.compile(f"[{_CJK}]+")
_WORD = re.compile(r"[^\W_]+")
# Combining diacritical marks only: the Japanese (semi-)voiced sound marks
# (U+3099, U+309A) are combining too, and dropping them would change the word.
_ACCENT = re.compile("[\u0300-\u036f]")

_STEMMER = snowballstemmer.stemmer("english")
_STEMS: dict[str, str] = {}
_STEM_MEMO_LIMIT = 500_000

K1 = 1.2
B = 0.75


def normalise(text: str) -> str:
    """NFKC, case-folded, Latin accents removed (é -> e, ü -> u, ß -> ss)."""
    folded = unicodedata.normalize("NFKC", text).casefold()
    if folded.isascii():
        return folded
    return unicodedata.normalize("NFC", _ACCENT.sub("", unicodedata.normalize("NFD", folded)))


def _stem(word: str) -> str:
    stemmed = _STEMS.get(word)
    if stemmed is None:
        stemmed = _STEMMER.stemWord(word)
        if len(_STEMS) < _STEM_MEMO_LIMIT:
            _STEMS[word] = stemmed
    return stemmed


def _cjk_grams(run: str) -> list[str]:
    if len(run) == 1:
        return [run]
    return [run[i : i + 2] for i in range(len(run) - 1)]


def word_terms(text: str) -> list[str]:
    """Stemmed words and CJK character bigrams of ``text``, in order."""
    terms: list[str] = []
    for word in _WORD.findall(normalise(text)):
        if not _CJK_RUN.search(word):
            terms.append(_stem(word))
            continue
        cursor = 0
        for match in _CJK_RUN.finditer(word):
            if match.start() > cursor:
                terms.append(_stem(word[cursor : match.start()]))
            terms.extend(_cjk_grams(match.group()))
            cursor = match.end()
        if cursor < len(word):
            terms.append(_stem(word[cursor:]))
    return terms


def trigram_terms(text: str) -> list[str]:
    """Character trigrams of the non-CJK words of ``text`` (words of 3+ characters)."""
    grams: list[str] = []
    for word in _WORD.findall(normalise(text)):
        for piece in _CJK_RUN.split(word):
            if len(piece) < 3:
                continue
            padded = f" {piece} "
            grams.extend(padded[i : i + 3] for i in range(len(padded) - 2))
    return grams


@dataclass
class Bm25Index:
    """BM25 over one kind of term, postings as flat arrays (one slice per term)."""

    vocabulary: dict[str, int]
    offsets: np.ndarray  # (terms + 1,) int64: term t's postings are [offsets[t], offsets[t+1])
    docs: np.ndarray  # int32 document of each posting
    weights: np.ndarray  # float32 saturated term frequency of each posting
    idf: np.ndarray  # float32 per term
    count: int

    @classmethod
    def build(cls, documents: Sequence[Sequence[str]]) -> Bm25Index:
        """The index of ``documents`` (each a list of terms)."""
        vocabulary: dict[str, int] = {}
        doc_ids: list[int] = []
        term_ids: list[int] = []
        counts: list[int] = []
        lengths = np.zeros(len(documents), dtype=np.float64)
        for doc, terms in enumerate(documents):
            lengths[doc] = len(terms)
            seen: dict[int, int] = {}
            for term in terms:
                term_id = vocabulary.setdefault(term, len(vocabulary))
                seen[term_id] = seen.get(term_id, 0) + 1
            doc_ids.extend([doc] * len(seen))
            term_ids.extend(seen.keys())
            counts.extend(seen.values())
        count = len(documents)
        terms_array = np.asarray(term_ids, dtype=np.int64)
        order = np.argsort(terms_array, kind="stable")
        docs = np.asarray(doc_ids, dtype=np.int32)[order]
        tf = np.asarray(counts, dtype=np.float64)[order]
        df = np.bincount(terms_array, minlength=len(vocabulary))
        offsets = np.zeros(len(vocabulary) + 1, dtype=np.int64)
        np.cumsum(df, out=offsets[1:])
        average = lengths.mean() if count and lengths.sum() else 1.0
        norm = K1 * (1 - B + B * lengths[docs] / average) if len(docs) else np.zeros(0)
        weights = (tf * (K1 + 1) / (tf + norm)).astype(np.float32)
        idf = np.log(1 + (count - df + 0.5) / (df + 0.5)).astype(np.float32)
        return cls(vocabulary, offsets, docs, weights, idf, count)

    def scores(self, query_terms: Sequence[str]) -> np.ndarray:
        """BM25 score of every document for the (de-duplicated) ``query_terms``."""
        slices_docs = []
        slices_weights = []
        for term in dict.fromkeys(query_terms):
            term_id = self.vocabulary.get(term)
            if term_id is None:
                continue
            start, end = self.offsets[term_id], self.offsets[term_id + 1]
            slices_docs.append(self.docs[start:end])
            slices_weights.append(self.weights[start:end] * self.idf[term_id])
        if not slices_docs:
            return np.zeros(self.count, dtype=np.float32)
        return np.bincount(
            np.concatenate(slices_docs), weights=np.concatenate(slices_weights), minlength=self.count
        ).astype(np.float32)


def _normalised(scores: np.ndarray) -> np.ndarray:
    top = float(scores.max()) if len(scores) else 0.0
    return scores / top if top > 0 and math.isfinite(top) else np.zeros_like(scores)


@dataclass
class TextIndex:
    """Word and trigram BM25 indexes over a brain's memories (in the brain's order)."""

    words: Bm25Index
    trigrams: Bm25Index

    @classmethod
    def build(cls, texts: Sequence[str]) -> TextIndex:
        """The index of one text per memory."""
        return cls(Bm25Index.build([word_terms(t) for t in texts]), Bm25Index.build([trigram_terms(t) for t in texts]))

    def word_scores(self, query: str) -> np.ndarray:
        """Word BM25 per memory, divided by the best (0..1)."""
        return _normalised(self.words.scores(word_terms(query)))

    def trigram_scores(self, query: str) -> np.ndarray:
        """Trigram BM25 per memory, divided by the best (0..1)."""
        return _normalised(self.trigrams.scores(trigram_terms(query)))
