"""A small made-up brain in English, Chinese and Japanese for the similar-memory tests
(none of it from the development set)."""

from __future__ import annotations

from connector.engine.format.brain import Brain
from tests.engine.hybrid_support import make_brain

MEMORIES = [
    {"title": "Dentist appointment",
     "content": "The dentist appointment is on 14 May at 3 pm at the clinic near Ikebukuro station.",
     "tags": ["health", "dentist"]},
    {"title": "Gym membership",
     "content": "The gym in Nakano costs 8,000 yen a month; I go on Mondays and Thursdays after work.",
     "tags": ["gym", "exercise"]},
    {"title": "奶奶的生日", "content": "奶奶的生日是十一月八日，她最喜欢喝龙井茶，每年都给她寄一盒。", "tags": ["奶奶", "生日"]},
    {"title": "図書館", "content": "区立図書館は毎週月曜日が休館日。本は二週間まで借りられる。", "tags": ["図書館", "本"]},
    {"title": "Work laptop",
     "content": "My work laptop is a ThinkPad X1 Carbon with 32 GB of memory and Ubuntu 24.04.",
     "tags": ["laptop", "tools"]},
    {"title": "Climbing shoes", "content": "I climb in La Sportiva Solution shoes, size 40, resoled every spring.",
     "tags": ["climbing", "gear"]},
    {"title": "Bread baking",
     "content": "Bake sourdough on Sundays: 75% hydration, 12 hours of cold proofing in the fridge.",
     "tags": ["baking", "food"]},
    {"title": "Train pass", "content": "The commuter pass between Shinjuku and Mitaka is renewed every six months.",
     "tags": ["commute", "train"]},
]


def governance_brain() -> tuple[Brain, dict[str, str]]:
    """The brain and title -> id."""
    return make_brain(MEMORIES)
