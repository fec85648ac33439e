"""Sphinx extension: the interview page shows the chapters' answers.

Each 30-second answer lives once, in the chapter that derives it (an
admonition of class ``interview`` under a label, ``(iv-ledger)=``), with
the chapter's glued numbers. The interview page shows it again with::

    ```{answer} iv-ledger
    ```

which, when the page is written, is replaced by a copy of the labelled
node of the chapter's doctree: the admonition (or, for a label on a
section, the section's first table: ``{answer} corrections``). The copy
is the chapter's text as read in this build's language -- in the Chinese
edition its translation from the chapter's catalog -- and the numbers the
chapter's code glued: nothing is typed twice, translated twice or
computed twice. Each chapter's interview box is followed by a link to
the interview page (its title, so translated with it).
"""
from __future__ import annotations

from docutils import nodes
from docutils.parsers.rst import Directive
from sphinx import addnodes
from sphinx.transforms.post_transforms import SphinxPostTransform
from sphinx.util import logging

LOG = logging.getLogger(__name__)

PAGE = "book/interview"


class answer(nodes.General, nodes.Element):
    """Placeholder for the node labelled ``label``."""


class AnswerDirective(Directive):
    required_arguments = 1

    def run(self):
        env = self.state.document.settings.env
        env.interview_answer_docs = getattr(
            env, "interview_answer_docs", set()) | {env.docname}
        return [answer(label=self.arguments[0].strip())]


def _link(docname: str) -> nodes.paragraph:
    ref = addnodes.pending_xref(
        "", nodes.inline("", "", classes=["xref", "std", "std-doc"]),
        refdomain="std", reftype="doc", reftarget="/" + PAGE,
        refexplicit=False, refwarn=True, refdoc=docname)
    return nodes.paragraph("", "", nodes.Text("\u2192 "), ref,
                           classes=["interview-link"])


def link_boxes(app, doctree):
    """Every interview box of a chapter is followed by a link to the
    page (outside the box: the box stays its 80 words)."""
    if app.env.docname == PAGE:
        return
    for box in list(doctree.findall(nodes.admonition)):
        if "interview" in box["classes"]:
            box.parent.insert(box.parent.index(box) + 1,
                              _link(app.env.docname))


def _clean(node):
    for n in node.findall(nodes.Element):
        n["ids"], n["names"] = [], []
        if isinstance(n, addnodes.pending_xref):
            n["refdoc"] = PAGE
    return node


class PasteAnswers(SphinxPostTransform):
    default_priority = 4    # before MyST-NB's pending glue and the xrefs

    def run(self, **kwargs):
        labels = self.env.get_domain("std").anonlabels   # any node's
        trees = {}
        for ph in list(self.document.findall(answer)):
            if self.app.builder.name == "gettext":   # the chapter's
                ph.parent.remove(ph)                  # messages, not ours
                continue
            docname, labelid = labels.get(ph["label"], (None, None))
            found = None
            if docname:
                if docname not in trees:
                    trees[docname] = self.env.get_doctree(docname)
                tree = trees[docname]
                found = next((n for n in tree.findall(nodes.Element)
                              if labelid in n.get("ids", ())), None)
            if isinstance(found, nodes.section):
                found = found.next_node(nodes.table)
            if found is None:
                LOG.warning(f"{{answer}} {ph['label']}: no admonition or "
                            "table under that label", location=ph)
                ph.parent.remove(ph)
                continue
            ph.replace_self(_clean(found.deepcopy()))


def outdated(app, env, added, changed, removed):
    """A chapter changed: the pages that show its answers are read again."""
    if added | changed | removed:
        return sorted(getattr(env, "interview_answer_docs", set())
                      - (added | changed | removed))
    return []


def purge(app, env, docname):
    getattr(env, "interview_answer_docs", set()).discard(docname)


def merge(app, env, docnames, other):
    env.interview_answer_docs = getattr(
        env, "interview_answer_docs", set()) | getattr(
        other, "interview_answer_docs", set())


def setup(app):
    app.add_node(answer)
    app.add_directive("answer", AnswerDirective)
    app.add_post_transform(PasteAnswers)
    app.connect("doctree-read", link_boxes)
    app.connect("env-get-outdated", outdated)
    app.connect("env-purge-doc", purge)
    app.connect("env-merge-info", merge)
    return {"parallel_read_safe": True, "parallel_write_safe": True,
            "env_version": 1}
