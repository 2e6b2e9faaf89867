"""001 Table 2 / Table 3 templates and custom-template validation."""

from __future__ import annotations

import pytest

from app.audit.icl.templates import (
    BUILTIN_TEMPLATES,
    custom_template,
    generation_prompt,
    resolve_template,
)
from app.datasets.types import Example

EXEMPLARS = (
    Example("Wall St. Bears Claw Back Into the Black", "Business"),
    Example("Galaxy, Crew Play to 0-0 Tie", "Sports"),
)


def test_agnews_prompt_has_table2_shape():
    t = resolve_template(None, "ag_news", ("World", "Sports", "Business", "Sci/Tech"))
    prompt = t.render(EXEMPLARS, "Rescuing an Old Saver")
    assert prompt == (
        "Classify the news articles into the categories of World, Sports, Business, and Technology. "
        "Output only the category name (no explanations or extra text) as the first token.\n\n"
        "Article: Wall St. Bears Claw Back Into the Black\nAnswer: Business\n\n"
        "Article: Galaxy, Crew Play to 0-0 Tie\nAnswer: Sports\n\n"
        "Article: Rescuing an Old Saver\nAnswer:"
    )
    assert t.words(("World", "Sci/Tech")) == ("World", "Technology")
    assert prompt.startswith(t.prefix(EXEMPLARS[:1]))


@pytest.mark.parametrize(
    ("name", "labels", "words"),
    [
        ("trec", ("Human", "Number"), ("Person", "Number")),
        ("dbpedia14", ("NaturalPlace", "WrittenWork", "Film"), ("Nature", "Book", "Film")),
    ],
)
def test_verbalizers_map_dataset_labels_to_table2_words(name, labels, words):
    assert BUILTIN_TEMPLATES[name].words(labels) == words
    for word in words:
        assert word in BUILTIN_TEMPLATES[name].head


def test_every_dataset_label_is_named_in_its_instruction(data_dir):
    import json

    for name, template in BUILTIN_TEMPLATES.items():
        labels = {
            json.loads(line)["label"] for line in (data_dir / name / "train.jsonl").read_text().splitlines()
        }
        for word in template.words(sorted(labels)):
            assert word in template.head, (name, word)


def test_generic_template_lists_the_labels():
    t = resolve_template(None, "sst2", ("negative", "positive"))
    assert "negative, positive" in t.head
    assert t.render((), "a fine film").endswith("Input: a fine film\nAnswer:")


def test_custom_template():
    t = custom_template("Sort these.\n\n{examples}\n\nQ: {query}\nA:", "Q: {text}\nA: {label}")
    assert t.render(EXEMPLARS[:1], "what?") == (
        "Sort these.\n\nQ: Wall St. Bears Claw Back Into the Black\nA: Business\n\nQ: what?\nA:"
    )


@pytest.mark.parametrize(
    ("template", "example_format", "message"),
    [
        ("no placeholders", "{text} {label}", "template must contain {examples}"),
        ("{examples} only", "{text} {label}", "template must contain {query}"),
        ("{query} {examples}", "{text} {label}", "after {examples}"),
        ("{examples} {query} {other}", "{text} {label}", "template may only use"),
        ("{examples} {query}", "{text}", "example_format must contain {label}"),
    ],
)
def test_custom_template_errors_name_the_field(template, example_format, message):
    with pytest.raises(ValueError, match=message.replace("{", r"\{").replace("}", r"\}")):
        custom_template(template, example_format)


def test_generation_prompt_is_table3():
    assert generation_prompt("Galaxy, Crew Play to 0-0 Tie (AP)") == (
        "Given a label of news type, generate the chosen type of news accordingly.\n\n"
        "News Type: Sports\nText: Galaxy, Crew Play to 0-0 Tie (AP)\n\n"
        "News Type: Sports\nText:"
    )
