"""Query and exemplar draws of the iclinf kind (001 §4.1): seeded, without replacement, fresh per query."""

from __future__ import annotations

from app.audit.kinds import iclinf


def test_draws_are_seeded_and_without_replacement(builtin_datasets):
    dataset = builtin_datasets.load("trec")
    draws = iclinf.draw_queries(dataset, shots=4, queries=50, seed=11)
    assert draws == iclinf.draw_queries(dataset, shots=4, queries=50, seed=11)
    assert draws != iclinf.draw_queries(dataset, shots=4, queries=50, seed=12)
    queries = [id(q) for q, _ in draws]
    assert len(set(queries)) == 50
    for _, exemplars in draws:
        assert len({id(e) for e in exemplars}) == 4
    assert len({tuple(id(e) for e in ex) for _, ex in draws}) == 50  # fresh per query


def test_leave_one_out_prompts_remove_each_position(builtin_datasets):
    from app.audit.icl.templates import resolve_template

    dataset = builtin_datasets.load("ag_news")
    template = resolve_template(None, "ag_news", dataset.labels)
    query, exemplars = iclinf.draw_queries(dataset, shots=3, queries=1, seed=0)[0]
    prompts = iclinf.leave_one_out_prompts(template, exemplars, query.text)
    assert prompts[0] == template.render(exemplars, query.text)
    for i in range(3):
        assert prompts[i + 1] == template.render(exemplars[:i] + exemplars[i + 1 :], query.text)
        assert exemplars[i].text not in prompts[i + 1]
