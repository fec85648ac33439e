"""Turn a py:percent script into a lab notebook (a tool for authors).

    python scripts/make_notebook.py labs/src.py labs/01_memory.ipynb

Cells start with ``# %%`` (code) or ``# %% [markdown]`` (text, each line
behind ``# ``); tags go on the marker: ``# %% tags=["parameters"]``.
The .ipynb is the file that is committed and run; outputs are left empty.
"""
import json
import re
import sys

import nbformat


def convert(text: str) -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook()
    nb.metadata.update({
        "kernelspec": {"name": "python3", "display_name": "Python 3",
                       "language": "python"},
        "language_info": {"name": "python"}})
    chunks = re.split(r"^# %%(.*)$", text, flags=re.M)
    for header, body in zip(chunks[1::2], chunks[2::2]):
        tags = re.search(r"tags=(\[.*?\])", header)
        tags = json.loads(tags.group(1)) if tags else []
        body = body.strip("\n")
        if "[markdown]" in header:
            lines = [re.sub(r"^# ?", "", ln) for ln in body.splitlines()]
            cell = nbformat.v4.new_markdown_cell("\n".join(lines))
        else:
            cell = nbformat.v4.new_code_cell(body)
        if tags:
            cell.metadata["tags"] = tags
        nb.cells.append(cell)
    return nb


if __name__ == "__main__":
    src, out = sys.argv[1:3]
    nb = convert(open(src).read())
    nbformat.validate(nb)
    nbformat.write(nb, out)
    print(f"wrote {out}: {len(nb.cells)} cells")
