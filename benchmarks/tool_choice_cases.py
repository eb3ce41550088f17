"""The requests ``tool_choice.py`` puts to the embedded model, in two splits.

Each split has its own phrasings (templates), fillers and chit-chat, so the held-out split
shares no sentence with the tuning split: a prompt tuned to the tuning split's wording
cannot fit the held-out one. Per split: requests that need one of the five declared tools
(with the values the arguments must carry), chit-chat and open questions that need none,
and ambiguous ones, either an indirect request that still needs a tool ("should I take an
umbrella in Oslo?") or a mention of a tool's topic that needs none ("I love rainy days").

The relevance set (open questions and follow-ups) is judged by a fixed rubric: the answer
holds one of the question's key words, is at most two sentences, and has no refusal
boilerplate.
"""

from __future__ import annotations

import random
from typing import Any

SPLITS = {"tuning": 1, "held_out": 2}

TOOLS = [
    {
        "type": "function",
        "name": "get_time",
        "description": "Get the current local time.",
        "parameters": {"type": "object", "properties": {}},
    },
    {
        "type": "function",
        "name": "get_weather",
        "description": "Get the weather forecast for a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
    {
        "type": "function",
        "name": "set_reminder",
        "description": "Set a reminder for the user at a given time.",
        "parameters": {
            "type": "object",
            "properties": {"text": {"type": "string"}, "when": {"type": "string"}},
            "required": ["text", "when"],
        },
    },
    {
        "type": "function",
        "name": "book_table",
        "description": "Book a restaurant table.",
        "parameters": {
            "type": "object",
            "properties": {"people": {"type": "integer"}, "time": {"type": "string"}},
            "required": ["people", "time"],
        },
    },
    {
        "type": "function",
        "name": "play_music",
        "description": "Play a song, an artist or a genre of music.",
        "parameters": {
            "type": "object",
            "properties": {"query": {"type": "string"}},
            "required": ["query"],
        },
    },
]

PEOPLE = {"two": 2, "three": 3, "four": 4, "five": 5, "six": 6}

# Per split: fillers, then per tool the phrasings that need it.
FILLERS = {
    "tuning": {
        "city": ["Paris", "Tokyo", "Boston", "Madrid", "Cairo", "Lima"],
        "task": ["call my sister", "buy milk", "water the plants", "send the report"],
        "when": ["five", "noon", "eight tonight", "nine tomorrow"],
        "music": ["jazz", "the Beatles", "some piano music", "Taylor Swift"],
    },
    "held_out": {
        "city": ["Oslo", "Denver", "Nairobi", "Seoul", "Dublin", "Quito"],
        "task": ["feed the cat", "pay the rent", "book the dentist", "take my pills"],
        "when": ["seven", "half past six", "ten in the morning", "midnight"],
        "music": ["classical music", "Beyonce", "some reggae", "Miles Davis"],
    },
}
NEEDS = {
    "tuning": {
        "get_time": [
            "What time is it?",
            "Do you know what time it is right now?",
            "Could you tell me the time please?",
            "What's the time?",
        ],
        "get_weather": [
            "What's the weather like in {city}?",
            "Will it rain in {city} tomorrow?",
            "How warm is it in {city} today?",
            "Can you check the weather in {city} for me?",
        ],
        "set_reminder": [
            "Remind me to {task} at {when}.",
            "Please set a reminder to {task} at {when}.",
            "Can you remind me at {when} to {task}?",
            "Don't let me forget to {task} at {when}.",
        ],
        "book_table": [
            "Book a table for {people} at {when}.",
            "I'd like a table for {people} people at {when}.",
            "Can you reserve a table for {people} tonight at {when}?",
            "Get us a table for {people} at {when} please.",
        ],
        "play_music": [
            "Play {music}.",
            "Can you put on {music}?",
            "I want to listen to {music}.",
            "Play me some {music} please.",
        ],
    },
    "held_out": {
        "get_time": [
            "Hey, what's the time right now?",
            "How late is it?",
            "Tell me the current time.",
            "Have you got the time?",
        ],
        "get_weather": [
            "What's the forecast for {city}?",
            "Is it sunny in {city} right now?",
            "Tell me the weather in {city}.",
            "How cold will it be in {city} this weekend?",
        ],
        "set_reminder": [
            "At {when}, remind me to {task}.",
            "Set a reminder for {when} to {task}.",
            "I need a reminder to {task} at {when}.",
            "Make sure I remember to {task} at {when}.",
        ],
        "book_table": [
            "Reserve a table for {people} at {when}.",
            "We need a dinner reservation for {people} at {when}.",
            "Could you book us a table, {people} people, at {when}?",
            "Make a restaurant booking for {people} at {when}.",
        ],
        "play_music": [
            "Put some {music} on.",
            "Could you play {music} for me?",
            "Start playing {music}.",
            "Let's hear {music}.",
        ],
    },
}
NONE = {
    "tuning": [
        "Tell me a joke.",
        "How are you today?",
        "What is the capital of France?",
        "Why is the sky blue?",
        "Thanks, that's all.",
        "Can you explain how a rainbow forms?",
        "What's a good name for a cat?",
        "Hello there!",
        "Give me a tip for sleeping better.",
        "Who wrote Romeo and Juliet?",
        "What does a bee eat?",
        "Good morning!",
        "How many legs does a spider have?",
        "Say something nice.",
    ],
    "held_out": [
        "What's your name?",
        "Nice to meet you.",
        "How do airplanes stay up?",
        "What is the biggest ocean?",
        "Can you recommend a good book?",
        "Okay, thank you so much.",
        "Why do cats purr?",
        "What's two plus two?",
        "Tell me something interesting.",
        "Who painted the Mona Lisa?",
        "How do I make tea?",
        "Goodbye for now.",
        "What is photosynthesis?",
        "Are you a robot?",
    ],
}
# Indirect requests that still need a tool, with the values their arguments must hold.
INDIRECT = {
    "tuning": [
        ("Should I bring an umbrella in London today?", "get_weather", {"city": "London"}),
        ("I'm running late, how much time do I have, what's the clock say?", "get_time", {}),
        ("My mom's birthday is at noon, don't let it slip my mind.", "set_reminder", {}),
        (
            "We're four people hungry for dinner at eight, can you sort that?",
            "book_table",
            {"people": 4},
        ),
        ("I'm in the mood for some rock music.", "play_music", {"query": "rock"}),
    ],
    "held_out": [
        ("Do I need a coat in Chicago tonight?", "get_weather", {"city": "Chicago"}),
        ("Is it already past six?", "get_time", {}),
        (
            "I always forget the laundry, nudge me about it at nine.",
            "set_reminder",
            {"text": "laundry"},
        ),
        ("Three of us want to eat out at seven, get us a spot.", "book_table", {"people": 3}),
        ("Some relaxing jazz would be lovely right now.", "play_music", {"query": "jazz"}),
    ],
}
# A tool's topic mentioned where no tool is needed.
TOPICAL = {
    "tuning": [
        "I love rainy weather.",
        "Time flies when you're having fun.",
        "What is your favourite kind of music?",
        "Restaurants in Paris are so expensive.",
        "Why do we forget things?",
    ],
    "held_out": [
        "Snow makes me happy.",
        "Who invented the clock?",
        "Music always cheers me up.",
        "What food is Italy famous for?",
        "How does memory work in the brain?",
    ],
}

# Open questions and follow-ups with the key words an answer that addresses them holds.
OPEN = {
    "tuning": [
        ([], "What is the capital of Japan?", ["tokyo"]),
        ([], "Why do leaves change colour in autumn?", ["chlorophyll", "sun", "light", "cold"]),
        ([], "How many days are in a week?", ["seven", "7"]),
        ([], "What do pandas eat?", ["bamboo"]),
        ([], "What is the boiling point of water?", ["100", "hundred", "212"]),
        ([], "Who was Albert Einstein?", ["physic", "scien", "relativ"]),
        ([], "What is the largest planet?", ["jupiter"]),
        ([], "How do I stay focused while studying?", ["break", "focus", "distract", "quiet"]),
        (
            [("user", "Tell me about the moon."), ("assistant", "The moon orbits the Earth.")],
            "How far away is it?",
            ["km", "kilomet", "mile", "far", "distance"],
        ),
        (
            [("user", "I want to learn to cook."), ("assistant", "Start with simple recipes.")],
            "What should I cook first?",
            ["pasta", "egg", "rice", "soup", "salad", "simple"],
        ),
    ],
    "held_out": [
        ([], "What is the capital of Italy?", ["rome"]),
        ([], "Why is the ocean salty?", ["salt", "mineral", "rock", "river"]),
        ([], "How many hours are in a day?", ["24", "twenty"]),
        ([], "What do cows eat?", ["grass", "hay"]),
        ([], "What colour is the sky on a clear day?", ["blue"]),
        ([], "Who was William Shakespeare?", ["writ", "play", "poet"]),
        ([], "What is the smallest planet?", ["mercury"]),
        ([], "How can I drink more water?", ["bottle", "water", "glass", "remind"]),
        (
            [("user", "Tell me about dogs."), ("assistant", "Dogs are loyal companions.")],
            "What do they need every day?",
            ["walk", "food", "exercise", "water", "love"],
        ),
        (
            [("user", "I want to start running."), ("assistant", "Running is great exercise.")],
            "How often should I go?",
            ["week", "day", "times", "often"],
        ),
    ],
}
REFUSALS = (
    "as an ai",
    "as a chatbot",
    "i don't have the ability",
    "i do not have the ability",
    "i'm not able to",
    "i am not able to",
    "i can't provide",
    "i cannot provide",
    "language model",
)


def draw_tool_cases(split: str) -> list[dict[str, Any]]:
    """The split's requests: each tool phrasing with two fillers, chit-chat, ambiguous."""
    rng = random.Random(SPLITS[split])
    fillers = FILLERS[split]
    cases: list[dict[str, Any]] = []
    for name, phrasings in NEEDS[split].items():
        for phrasing in phrasings:
            for _ in range(2):
                people = rng.choice(list(PEOPLE))
                fill = {key: rng.choice(values) for key, values in fillers.items()}
                fill["people"] = people
                text = phrasing.format(**fill)
                expect: dict[str, Any] = {}
                if name == "get_weather":
                    expect = {"city": fill["city"]}
                elif name == "set_reminder":
                    expect = {"text": fill["task"].split()[-1]}
                elif name == "book_table":
                    expect = {"people": PEOPLE[people]}
                elif name == "play_music":
                    expect = {"query": fill["music"].split()[-1]}
                cases.append({"text": text, "tool": name, "expect": expect, "kind": "needs"})
    cases += [{"text": t, "tool": None, "expect": {}, "kind": "none"} for t in NONE[split]]
    cases += [
        {"text": t, "tool": name, "expect": expect, "kind": "indirect"}
        for t, name, expect in INDIRECT[split]
    ]
    cases += [{"text": t, "tool": None, "expect": {}, "kind": "topical"} for t in TOPICAL[split]]
    rng.shuffle(cases)
    return cases


def judge_answer(answer: str, keys: list[str]) -> dict[str, bool]:
    """The rubric: addresses the question (a key word), one or two sentences, no refusal."""
    text = answer.lower()
    sentences = [s for s in text.replace("!", ".").replace("?", ".").split(".") if s.strip()]
    checks = {
        "addresses": any(key in text for key in keys),
        "short": 1 <= len(sentences) <= 2,
        "no_refusal": not any(phrase in text for phrase in REFUSALS),
    }
    checks["relevant"] = all(checks.values())
    return checks
