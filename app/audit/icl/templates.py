"""Prompt templates of 001 App. D: Table 2 (ICL classification) and Table 3 (synthetic generation).

A classification prompt is an instruction, k exemplars and the query:

    {instruction}

    {input_prefix} {text_1}
    {answer_prefix} {word(label_1)}

    …

    {input_prefix} {query}
    {answer_prefix}

`verbalizer` maps the dataset's label to the word 001 Table 2 uses (ag_news "Sci/Tech" → "Technology",
trec "Human" → "Person", dbpedia14 "NaturalPlace" → "Nature", …). A custom template is a string with
`{examples}` and `{query}` placeholders; each exemplar is rendered by an example format with `{text}`
and `{label}` placeholders.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from app.datasets.types import Example

DEFAULT_EXAMPLE_FORMAT = "Input: {text}\nOutput: {label}"


@dataclass(frozen=True)
class ClassificationTemplate:
    """An ICL classification prompt: `head` (before the exemplars), one `example_format` per exemplar
    (placeholders `{text}`, `{label}`), `query_format` (placeholder `{query}`), joined by `separator`."""

    head: str
    example_format: str
    query_format: str
    separator: str = "\n\n"
    verbalizer: Mapping[str, str] = field(default_factory=dict)

    def word(self, label: str) -> str:
        """The word the prompt uses for a dataset label."""
        return self.verbalizer.get(label, label)

    def example_block(self, example: Example) -> str:
        return self.example_format.format(text=example.text, label=self.word(example.label or ""))

    def prefix(self, examples: Sequence[Example]) -> str:
        """Everything before the query block, ending in the separator (shared by leave-one-out prompts)."""
        parts = [self.head] if self.head else []
        parts += [self.example_block(e) for e in examples]
        return "".join(p + self.separator for p in parts)

    def render(self, examples: Sequence[Example], query: str) -> str:
        """The full prompt for `query` with `examples` in order."""
        return self.prefix(examples) + self.query_format.format(query=query)

    def words(self, labels: Sequence[str]) -> tuple[str, ...]:
        """The label set as the model is asked to output it (what `label_logprobs` scores)."""
        return tuple(self.word(label) for label in labels)


def _table2(instruction: str, input_prefix: str, answer_prefix: str, verbalizer: dict[str, str]):
    return ClassificationTemplate(
        head=instruction,
        example_format=f"{input_prefix} {{text}}\n{answer_prefix} {{label}}",
        query_format=f"{input_prefix} {{query}}\n{answer_prefix}",
        verbalizer=verbalizer,
    )


_OUTPUT_ONLY = "Output only the category name (no explanations or extra text) as the first token."

BUILTIN_TEMPLATES: dict[str, ClassificationTemplate] = {
    # 001 Table 2, AGNews.
    "ag_news": _table2(
        "Classify the news articles into the categories of World, Sports, Business, and Technology. "
        + _OUTPUT_ONLY,
        "Article:",
        "Answer:",
        {"Sci/Tech": "Technology"},
    ),
    # 001 Table 2, DBPedia (dataset labels → the 14 words of the instruction).
    "dbpedia14": _table2(
        "Classify the documents based on whether they are about one of Company, School, Artist, Athlete, "
        "Politician, Transportation, Building, Nature, Village, Animal, Plant, Album, Film, or Book. "
        + _OUTPUT_ONLY,
        "Article:",
        "Answer:",
        {
            "EducationalInstitution": "School",
            "OfficeHolder": "Politician",
            "MeanOfTransportation": "Transportation",
            "NaturalPlace": "Nature",
            "WrittenWork": "Book",
        },
    ),
    # 001 Table 2, TREC.
    "trec": _table2(
        "Classify the questions based on whether their answer type is a Number, Location, Person, "
        "Description, Entity, or Abbreviation. Output only the question type (no explanations or extra "
        "text) as the first token.",
        "Question:",
        "Answer Type:",
        {"Human": "Person"},
    ),
}


def generic_template(labels: Sequence[str]) -> ClassificationTemplate:
    """The Table 2 shape for any classification dataset: the instruction lists the dataset's labels."""
    return _table2(
        f"Classify the inputs into the categories of {', '.join(labels)}. {_OUTPUT_ONLY}",
        "Input:",
        "Answer:",
        {},
    )


def custom_template(template: str, example_format: str = DEFAULT_EXAMPLE_FORMAT) -> ClassificationTemplate:
    """A user template: `template` has `{examples}` then `{query}`; exemplars use `example_format`.

    Raises ValueError (message naming the field) when a placeholder is missing or misplaced.
    """
    for name in ("{examples}", "{query}"):
        if template.count(name) != 1:
            raise ValueError(f"template must contain {name} exactly once")
    for name in ("{text}", "{label}"):
        if name not in example_format:
            raise ValueError(f"example_format must contain {name}")
    for name, text, fields in (
        ("template", template, {"examples": "", "query": ""}),
        ("example_format", example_format, {"text": "", "label": ""}),
    ):
        try:
            text.format(**fields)
        except (KeyError, IndexError, ValueError) as exc:
            placeholders = " and ".join("{" + f + "}" for f in fields)
            raise ValueError(
                f"{name} may only use the placeholders {placeholders}; write other braces as {{{{ }}}}"
            ) from exc
    head, rest = template.split("{examples}")
    if "{query}" not in rest:
        raise ValueError("template must put {query} after {examples}")
    between, after = rest.split("{query}")
    separator = "\n\n"
    return ClassificationTemplate(
        head=head.rstrip("\n"),
        example_format=example_format,
        query_format=between.lstrip("\n") + "{query}" + after,
        separator=separator,
    )


def resolve_template(
    template: str | None, dataset_name: str, labels: Sequence[str], example_format: str | None = None
) -> ClassificationTemplate:
    """None → 001 Table 2 for ag_news, dbpedia14, trec, else the generic one; a built-in name
    ("ag_news", "dbpedia14", "trec", "generic") → that one; otherwise a custom template string."""
    if template is None:
        template = dataset_name if dataset_name in BUILTIN_TEMPLATES else "generic"
    if template == "generic":
        return generic_template(labels)
    if template in BUILTIN_TEMPLATES:
        return BUILTIN_TEMPLATES[template]
    return custom_template(template, example_format or DEFAULT_EXAMPLE_FORMAT)


# 001 Table 3: one-shot prompt for DP synthetic generation (label fixed, e.g. "Sports").
GENERATION_INSTRUCTION = "Given a label of news type, generate the chosen type of news accordingly."


def generation_prompt(example_text: str, label: str = "Sports") -> str:
    """001 Table 3: the instruction, one private example with its label, then the label and "Text:"."""
    return (
        f"{GENERATION_INSTRUCTION}\n\nNews Type: {label}\nText: {example_text}\n\nNews Type: {label}\nText:"
    )


def public_generation_prompt(label: str = "Sports") -> str:
    """The public (context-free) prompt of Amin et al.'s sparse vector variant: 001 Table 3 without the private
    example, i.e. the instruction, then the label and "Text:"."""
    return f"{GENERATION_INSTRUCTION}\n\nNews Type: {label}\nText:"
