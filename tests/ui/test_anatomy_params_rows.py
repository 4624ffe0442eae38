"""The Anatomy cost table's parameter rows on MiniLM (BERT: Q, K, V and W_O biases): each weight
row is its matrix alone, as the drawn shape multiplies out ("W_Q (params)" read 147.8 k, its bias
folded in, while W_O's bias had a row of its own); the biases have rows of their own; and the rows
add up to the layer's attention parameters as the loaded model holds them."""

from attnviz.engine.computing.request import RunRequest
from attnviz.engine.calc import format_count
from attnviz.figures import anatomy as fig

TEXT = "The keys to the cabinet are on the table."


def painted_rows(lay) -> dict[str, list[str]]:
    """The table's painted cells, row by row: {row name: [one head, all heads, one wide head]}."""
    cells = sorted(((rect.top(), rect.left(), text) for rect, text, _f, _c, _a in lay.table))
    rows: dict[float, list[str]] = {}
    for top, _left, text in cells:
        rows.setdefault(round(top), []).append(text)
    return {" ".join(r[0].split()): r[1:] for r in rows.values() if len(r) >= 4}


def test_weight_rows_are_their_matrices_and_the_parts_add_up(qapp, minilm):
    r = minilm.run(TEXT, request=RunRequest(inputs=True))
    layer = 3
    view = fig.make_anatomy_view(minilm, r, layer, 1)
    rows = painted_rows(fig.layout(view, 1280))
    d = minilm.config.d_model
    assert rows["W_Q (params)"][1] == format_count(d * d)  # [384, 384]: 147.5 k
    assert rows["W_O (params)"][1] == format_count(d * d)
    assert rows["Q, K, V biases (params)"][1] == format_count(3 * d)
    assert rows["W_O bias (no head's) (params)"][1] == format_count(d)
    lw = minilm.weights.layers[layer]
    held = lw.w_qkv.size + lw.b_qkv.size + lw.w_o.size + lw.b_o.size
    assert sum(c.all_heads for c in view.costs if c.unit == "params") == held == 591_360
