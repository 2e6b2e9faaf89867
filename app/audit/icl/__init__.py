"""What builds and reads in-context prompts: the prompt texts (prompts, templates), exemplar pools and
neighbouring contexts (contexts), leave-one-out influence (iclinf), DP synthetic generation (synthetic),
text overlap scores (overlap), utility and the vote simulation's fidelity."""
