"""The result of a `synthetic_generation` audit: the privacy spent generating DP synthetic texts."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from app.audit.results.base import ResultBase, VerdictRow


class SyntheticGenerationAuditResult(ResultBase):
    """Privacy actually spent by DP synthetic text generation on these private examples, beside its budget.

    The headline is the RDP curve: `rdp_empirical` (data-dependent, 001 Eq. 7 summed over the private tokens)
    against `rdp_theory` (the bound for any examples), both per order in `orders`, for remove-one neighbours.
    ε_empirical converts the measured curve by dp_accounting's RDP → (ε, δ) conversion (Balle et al. 2020
    Thm 21 / Canonne-Kamath-Steinke 2020 Prop. 12, the formula of 001 Thm C.8) minimized over the orders.
    """

    kind: Literal["synthetic_generation"] = "synthetic_generation"
    epsilon_empirical: float = Field(
        description="ε spent on these very examples: the measured RDP curve (rdp_empirical) converted to (ε, δ) "
        "by the Balle et al. 2020 / Canonne-Kamath-Steinke conversion (dp_accounting), best order "
        "alpha_empirical; at most epsilon_theory when the generator works as designed."
    )
    epsilon_theory: float = Field(
        description="The ε budget the parameters guarantee for any examples (001 Alg. 2)."
    )
    variant: Literal["simplified", "svt"] | None = Field(
        default=None,
        description="simplified: every token private; svt: Amin et al.'s public logits + sparse vector test.",
    )
    orders: list[float] | None = Field(default=None, description="Rényi orders α of the two curves.")
    rdp_empirical: list[float] | None = Field(
        default=None,
        description="Measured data-dependent RDP per order: Σ over private tokens of max_p D_α↔ (001 Eq. 7), "
        "plus with svt each sparse-vector run at its measured sensitivity.",
    )
    rdp_theory: list[float] | None = Field(
        default=None,
        description="The theory's RDP per order for the whole run (Eq. 8 / EM bound; Amin et al. Thm 1).",
    )
    alpha: float | None = Field(
        default=None, description="α* of the theory (001 Alg. 2); step_losses are at it."
    )
    alpha_empirical: float | None = Field(
        default=None, description="Order at which epsilon_empirical is attained."
    )
    temperature: float | None = Field(
        default=None, description="Sampling temperature used (solved or given)."
    )
    clip: float | None = Field(default=None, description="Logit clipping level used.")
    batch_size: int | None = Field(default=None, description="Private examples per batch.")
    sequences: int | None = Field(default=None, description="Synthetic texts generated.")
    max_new_tokens: int | None = Field(default=None, description="Token limit per text.")
    delta: float | None = Field(default=None, description="The δ at which ε is stated.")
    target_epsilon: float | None = Field(
        default=None, description="The ε asked for, when a parameter was solved."
    )
    generated_tokens: int | None = Field(default=None, description="Tokens generated in all.")
    private_tokens: int | None = Field(
        default=None, description="Tokens that spent budget (all, unless svt)."
    )
    public_tokens: int | None = Field(default=None, description="svt: tokens sampled from the public logits.")
    svt_threshold: float | None = Field(default=None, description="svt: threshold θ.")
    svt_noise: float | None = Field(default=None, description="svt: Laplace noise scale σ.")
    public_temperature: float | None = Field(default=None, description="svt: temperature of public tokens.")
    max_private_tokens: int | None = Field(default=None, description="svt: private-token budget r.")
    svt_sensitivities: list[float] | None = Field(
        default=None,
        description="svt: per sparse-vector run (finished by a private token, or the open one), the measured "
        "max_p |d(D) − d(D∖{p})| (theory: 1/s); each run adds α·2(Δ/σ)² to rdp_empirical.",
    )
    step_losses: list[list[float]] | None = Field(
        default=None, description="Data-dependent RDP at α per token, per text (0 for a public token)."
    )
    private_mask: list[list[bool]] | None = Field(default=None, description="Per text, per token: private?")
    texts: list[str] | None = Field(default=None, description="The synthetic texts.")
    dataset: str | None = Field(default=None, description="Dataset of the private examples.")
    model: str | None = Field(default=None, description="The model audited.")
    label: str | None = Field(default=None, description="The label shared by examples and texts.")
    llm_forward_passes: int | None = Field(default=None, description="Forward passes the model ran.")

    def verdicts(self) -> list[VerdictRow]:
        """Spending more than the budget would be a bug in the generator or its accounting."""
        over = self.epsilon_empirical > self.epsilon_theory * (1 + 1e-9)
        return [VerdictRow("synthetic_generation", self.epsilon_empirical, self.epsilon_theory, over)]


Result = SyntheticGenerationAuditResult


# The output of a real run of examples/synthgen-eps1.json with sequences = 1, max_new_tokens = 4, batch_size = 4
# (shown in the OpenAPI document as the example result).
EXAMPLE: dict[str, Any] = {
    "kind": "synthetic_generation",
    "variant": "simplified",
    "dataset": "ag_news",
    "model": "smollm2-135m-instruct",
    "label": "Sports",
    "batch_size": 4,
    "clip": 10.0,
    "temperature": 20.22692684427546,
    "sequences": 1,
    "max_new_tokens": 4,
    "delta": 1e-05,
    "target_epsilon": 1.0,
    "epsilon_theory": 1.0,
    "alpha": 18.0,
    "epsilon_empirical": 0.0981039518706319,
    "alpha_empirical": 128.0,
    "orders": [
        1.25,
        1.5,
        1.75,
        2.0,
        3.0,
        4.0,
        5.0,
        6.0,
        7.0,
        8.0,
        9.0,
        10.0,
        11.0,
        12.0,
        13.0,
        14.0,
        15.0,
        16.0,
        17.0,
        18.0,
        19.0,
        20.0,
        24.0,
        28.0,
        32.0,
        40.0,
        48.0,
        56.0,
        64.0,
        80.0,
        100.0,
        128.0,
        160.0,
        192.0,
        256.0,
        384.0,
        512.0,
        1024.0,
    ],
    "rdp_empirical": [
        0.00040572672157423995,
        0.0004869985867088644,
        0.0005683130162239536,
        0.0006496701784755032,
        0.0009755295379294537,
        0.0013020862091076186,
        0.0016293511911791292,
        0.0019573356095467175,
        0.002286050720896604,
        0.002615507918414599,
        0.0029457187371721982,
        0.003276694859678742,
        0.003608448121605434,
        0.0039409905176879655,
        0.004274334207804653,
        0.004608491523234657,
        0.00494347497309874,
        0.005279297250985356,
        0.005615971241761719,
        0.00595351002857329,
        0.006291926900031738,
        0.006631235357591971,
        0.007997662956591163,
        0.009379496699267586,
        0.01077772018955216,
        0.013627661155284798,
        0.016557056347968252,
        0.01957718253211497,
        0.022701334731872982,
        0.029326033465400574,
        0.03850814277066125,
        0.05349913562259786,
        0.07335346358690184,
        0.09383395055890667,
        0.12876578810148379,
        0.17235608794867385,
        0.19824060164207413,
        0.23803667482072316,
    ],
    "rdp_theory": [
        0.038190928628288656,
        0.04582911435394639,
        0.05346730007960412,
        0.06110548580526185,
        0.09165822870789278,
        0.1222109716105237,
        0.15276371451315462,
        0.18331645741578556,
        0.21386920031841647,
        0.2444219432210474,
        0.2749746861236783,
        0.30552742902630925,
        0.3360801719289402,
        0.3666329148315711,
        0.39718565773420206,
        0.42773840063683294,
        0.4582911435394639,
        0.4888438864420948,
        0.5193966293447257,
        0.5499493722473566,
        0.5805021151499876,
        0.6110548580526185,
        0.7332658296631422,
        0.8554768012736659,
        0.9143076359907889,
        0.9295841964793001,
        0.9396602398553638,
        0.9468050708440416,
        0.9521353415854917,
        0.9595572375547187,
        0.9654610184393322,
        0.9706024213199483,
        0.9742609937201709,
        0.9766936570438793,
        0.9797273313063862,
        0.9827530847483644,
        0.9842630008495472,
        0.9865241850792755,
    ],
    "generated_tokens": 4,
    "private_tokens": 4,
    "public_tokens": 0,
    "step_losses": [
        [0.0014338241620347665, 0.0017626571454320333, 0.0014730768708267681, 0.0012839518502797214]
    ],
    "private_mask": [[True, True, True, True]],
    "texts": ["Actuallywara Playersistocene"],
    "llm_forward_passes": 5,
}
