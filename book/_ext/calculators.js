// Calculators of the book, run in the reader's browser (see calculators.py).
// Pyodide comes from this site's _static/calculators/pyodide/ (never a CDN);
// labkit.predict and calc_core.py come from labkit-predict.zip next to this
// file. Each form change runs `python -m labkit NAME ... --json` in-process
// (calc_core.page_result) and redraws the verdict, the chart and the table
// from its result. Opened from disk (file://), a browser refuses the
// module import and the fetches Pyodide needs: the box then says in one
// sentence how to open the page over HTTP (`make serve`) and keeps the
// worked example the build computed.
(function () {
  "use strict";
  const base = new URL(".", document.currentScript.src).href;
  let python = null;

  function loadScript(src) {
    return new Promise((resolve, reject) => {
      const s = document.createElement("script");
      s.src = src;
      s.onload = resolve;
      s.onerror = () => reject(new Error("cannot load " + src));
      document.head.appendChild(s);
    });
  }

  function startPython() {
    if (!python) {
      python = (async () => {
        const dir = base + "pyodide/";
        await loadScript(dir + "pyodide.js");
        const py = await loadPyodide({
          indexURL: dir, packageBaseUrl: dir,
          lockFileURL: dir + "pyodide-lock.json",
        });
        const zip = await fetch(base + "labkit-predict.zip");
        py.unpackArchive(await zip.arrayBuffer(), "zip",
                         { extractDir: "/home/pyodide/calc" });
        py.runPython("import sys; sys.path.insert(0, '/home/pyodide/calc')");
        return py.pyimport("calc_core");
      })();
    }
    return python;
  }

  function cell(tag, text) {
    const e = document.createElement(tag);
    e.textContent = text;
    return e;
  }

  function table(rows) {
    const t = document.createElement("table");
    t.className = "calc-table";
    const body = t.appendChild(document.createElement("tbody"));
    for (const r of rows) {
      const tr = body.appendChild(document.createElement("tr"));
      tr.appendChild(cell("th", r.key));
      const td = tr.appendChild(document.createElement("td"));
      if (r.columns) {
        const sub = td.appendChild(document.createElement("table"));
        sub.className = "calc-subtable";
        const head = sub.appendChild(document.createElement("thead"))
          .appendChild(document.createElement("tr"));
        r.columns.forEach((c) => head.appendChild(cell("th", c)));
        const sb = sub.appendChild(document.createElement("tbody"));
        for (const row of r.cells) {
          const str = sb.appendChild(document.createElement("tr"));
          row.forEach((c) => str.appendChild(cell("td", c)));
        }
      } else {
        td.textContent = r.value;
      }
    }
    return t;
  }

  // The model picker (calc_core.MODEL): a picked preset turns the shape
  // flags off, as calc_core.model_argv does.
  function pickModel(form) {
    const pick = form.querySelector("[data-model]");
    if (!pick) return;
    const on = pick.value !== "";
    for (const el of form.querySelectorAll("[data-shape]")) {
      el.disabled = on;
    }
  }

  function argv(form) {
    pickModel(form);
    const out = [];
    for (const el of form.querySelectorAll("[data-flag]")) {
      if (el.disabled) continue;
      if (el.type === "checkbox") {
        if (el.checked) out.push(el.dataset.flag);
      } else if (el.value.trim() !== "") {
        out.push(el.dataset.flag, el.value.trim());
      }
    }
    return out;
  }

  // This page's address under `make serve` (scripts/serve_book.py serves
  // _build/html at the box's data-serve address; Chinese pages are zh/).
  function servedURL(box) {
    const here = location.href.split("#")[0];
    for (const m of ["/_build/html/", "/html/"]) {
      const i = here.lastIndexOf(m);
      if (i >= 0) return box.dataset.serve + here.slice(i + m.length);
    }
    return box.dataset.serve;
  }

  function setup(box) {
    const name = box.dataset.calculator;
    const form = box.querySelector(".calc-form");
    const status = box.querySelector(".calc-status");
    const result = box.querySelector(".calc-result");
    // the page's words (calc_core.LABELS, in the page's language)
    const say = JSON.parse(box.dataset.labels);
    let seq = 0;
    if (location.protocol === "file:") {
      status.hidden = false;
      status.textContent = say.file.replace("{url}", servedURL(box));
      box.dataset.state = "file";
      return;
    }
    form.hidden = false;
    status.hidden = false;
    status.textContent = say.loading;

    async function update() {
      const mine = ++seq;
      const args = argv(form);
      const core = await startPython();
      if (mine !== seq) return;  // a newer change is on its way
      const out = JSON.parse(core.page_result(name, JSON.stringify(args),
                                              box.dataset.lang));
      result.replaceChildren();
      if (out.result.error) {
        status.textContent = say.error + out.result.error;
        box.dataset.state = "error";
      } else {
        status.textContent = say.computed + " python -m labkit " +
          name + " " + args.join(" ");
        result.appendChild(cell("p", out.verdict)).className =
          "calc-verdict";
        if (out.svg) result.insertAdjacentHTML("beforeend", out.svg);
        result.appendChild(table(out.rows));
        box.dataset.state = "ready";
      }
      box.dataset.argv = JSON.stringify(args);
    }

    function run() {
      update().catch((e) => {
        status.textContent = say.failed + e;
        box.dataset.state = "failed";
      });
    }
    form.addEventListener("input", run);
    form.addEventListener("change", run);
    run();
  }

  function init() {
    document.querySelectorAll(".labkit-calculator").forEach(setup);
  }
  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", init);
  } else {
    init();
  }
})();
