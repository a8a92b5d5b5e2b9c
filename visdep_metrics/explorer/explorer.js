"use strict";
const D = JSON.parse(document.getElementById("data").textContent);
function decode(text, Type) {
  const bytes = atob(text), out = new Uint8Array(bytes.length);
  for (let i = 0; i < bytes.length; i++) out[i] = bytes.charCodeAt(i);
  return new Type(out.buffer);
}
const Q = D.questions, N = Q.n;
const col = {
  bench: decode(Q.benchmark, Uint8Array), k: decode(Q.k, Uint8Array), answer: decode(Q.answer, Uint8Array),
  offsets: decode(Q.offsets, Int32Array), T: decode(Q.T, Float32Array), V: decode(Q.V, Float32Array),
  S: decode(Q.S, Float64Array), s_tst: decode(Q.s_tst, Float32Array),
  grounded: decode(Q.grounded, Int8Array), kept_llm_inspector: decode(Q.kept_llm_inspector, Int8Array),
  kept_b_clean: decode(Q.kept_b_clean, Int8Array),
  V_frame: decode(Q.V_frame, Float32Array), V_order: decode(Q.V_order, Float32Array),
  temporal: decode(Q.temporal, Int8Array),
};
const strings = ([values, codes]) => { const c = decode(codes, Int32Array); return q => c[q] < 0 ? null : values[c[q]]; };
const category = strings(Q.category), video = strings(Q.video), questionText = strings(Q.question);
const sheet = strings(Q.sheet), optionText = strings(Q.options);
const shownOptions = decode(Q.n_options_shown, Uint8Array), optionStart = new Int32Array(N + 1);
for (let q = 0; q < N; q++) optionStart[q + 1] = optionStart[q] + shownOptions[q];
const options = q => Array.from({length: shownOptions[q]}, (_, j) => optionText(optionStart[q] + j));
const answers = {};
for (const [m, modes] of Object.entries(D.answers)) {
  answers[m] = {};
  for (const [mode, v] of Object.entries(modes)) answers[m][mode] = {p: decode(v.p, Uint8Array), pick: decode(v.pick, Int8Array)};
}
const terms = {T: {}, V: {}};
for (const s of ["T", "V"]) for (const [m, v] of Object.entries(D.terms[s])) terms[s][m] = decode(v, Int16Array);
const LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ";
const fmt = (x, d = 3) => (x === null || x === undefined || Number.isNaN(x)) ? "–"
  : x.toFixed(d).replace(/^-(0\.?0*)$/, "$1");  // no "-0.000"
const pct = x => fmt(x, 1);
// Every string from data (ids, categories, texts, options, model names, videos) is text: escaped wherever it goes
// into HTML (esc), or into a Plotly label (plotText: Plotly reads a few tags, entities, "%{...}" in hover templates).
const esc = s => String(s ?? "").replace(/[&<>"']/g, c => ({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;"}[c]));
const plotText = s => esc(s).replace(/[%{}$]/g, c => `&#${c.charCodeAt(0)};`);
const benchName = b => D.benchmarks[b].title;
const COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"];
const clip = (text, n) => text.length > n ? text.slice(0, n - 1) + "…" : text;

// ---------------------------------------------------------------- views
function show(view) {
  for (const el of document.querySelectorAll(".view")) el.classList.toggle("active", el.id === "view-" + view);
  for (const el of document.querySelectorAll("header button")) el.classList.toggle("active", el.dataset.view === view);
  if (view === "space") drawSpace();
  if (view === "questions" && table) table.columns.adjust();
}
for (const el of document.querySelectorAll("header button")) el.addEventListener("click", () => show(el.dataset.view));

// ---------------------------------------------------------------- the diagnostic space and τ
const modelSelect = document.getElementById("model");
modelSelect.add(new Option("mean of the evaluation VLMs", "-1"));
D.models.forEach((m, i) => { if (m.video) modelSelect.add(new Option(`${m.label} (${m.role})`, String(i))); });
const signals = [...new Set(D.sweeps.map(s => s.signal))];
const signalSelect = document.getElementById("signal");
signals.forEach(s => signalSelect.add(new Option(s, s)));
if (signals.includes("S")) signalSelect.value = "S";
const tauInput = document.getElementById("tau"), tauRange = document.getElementById("tau-range");
tauInput.value = D.tau; tauRange.value = D.tau;
const currentTau = () => parseFloat(tauInput.value);
document.getElementById("space-note").textContent =
  `Each benchmark placed by Blind Gap and Visual Gain (in %), size by Acc_V; bars: ${D.confidence}% intervals ` +
  `(counting the videos and the prompts questions share) of the full benchmark and of the grounded subset at the ` +
  `audit's τ = ${D.tau}. The τ control moves the hollow points, point estimates from the per-question data (no interval).`;

// each model's correctness per question (1, 0; NaN without a run) and each benchmark's questions, computed once
const correctness = {};
for (const [m, modes] of Object.entries(answers)) {
  correctness[m] = {};
  for (const [mode, a] of Object.entries(modes)) {
    const c = new Float32Array(N);
    for (let q = 0; q < N; q++) c[q] = a.pick[q] < 0 ? NaN : (a.pick[q] === col.answer[q] ? 1 : 0);
    correctness[m][mode] = c;
  }
}
const rowsOf = D.benchmarks.map((_, b) => { const r = []; for (let q = 0; q < N; q++) if (col.bench[q] === b) r.push(q); return Int32Array.from(r); });
// Blind Gap and Visual Gain (in %) of benchmark b's questions with S <= tau, for model m (-1: the mean of the
// evaluation VLMs, as headline.csv averages them)
function atTau(b, tau, m) {
  const members = m < 0 ? D.benchmarks[b].mean_of : [m];
  const withVideo = members.every(i => correctness[i] && correctness[i].video);
  const blindOf = members.map(i => correctness[i] && correctness[i].blind);
  const videoOf = withVideo ? members.map(i => correctness[i].video) : [];
  let n = 0, blind = 0, video = 0, inverseK = 0;
  for (const q of rowsOf[b]) {
    if (!(col.S[q] <= tau)) continue;
    let cb = 0, cv = 0;
    for (const c of blindOf) cb += c ? c[q] : NaN;
    for (const c of videoOf) cv += c[q];
    n++; blind += cb / members.length; video += cv / members.length; inverseK += 1 / col.k[q];
  }
  if (!n || !members.length) return {n, bg: NaN, vg: NaN};
  return {n, bg: 100 * (blind - inverseK) / n, vg: withVideo ? 100 * (video - blind) / n : NaN};
}
function auditPoint(b, subset, m) {
  return D.points.find(p => p.benchmark === D.benchmarks[b].name && p.subset === subset && p.model === m);
}
function drawSpace() {
  const m = parseInt(modelSelect.value), tau = currentTau();
  const traces = [];
  D.benchmarks.forEach((b, i) => {
    const color = COLORS[i % COLORS.length];
    const SUBSETS = {full: "full", grounded: `grounded (audit's τ = ${D.tau})`,
                     temporal: `temporal (grounded, V_order ≥ ${D.tau_order})`};
    for (const [subset, symbol] of [["full", "circle"], ["grounded", "diamond"], ["temporal", "square"]]) {
      const p = auditPoint(i, subset, m);
      if (!p || p.visual_gain === null) continue;
      traces.push({
        name: `${plotText(b.title)}, ${SUBSETS[subset]}`,
        legendgroup: b.name, type: "scatter", mode: "markers", x: [p.blind_gap], y: [p.visual_gain],
        meta: {benchmark: b.name, subset},
        customdata: [[p.n, p.acc_video, p.blind_gap_lo, p.blind_gap_hi, p.visual_gain_lo, p.visual_gain_hi]],
        hovertemplate: `${plotText(b.title)}, ${subset}<br>n = %{customdata[0]}, Acc_V = %{customdata[1]:.1f}<br>` +
          "BG %{x:.1f} [%{customdata[2]:.1f}, %{customdata[3]:.1f}]<br>" +
          "VG %{y:.1f} [%{customdata[4]:.1f}, %{customdata[5]:.1f}]<extra></extra>",
        marker: {symbol, color, size: 6 + (p.acc_video || 0) / 4, opacity: subset === "full" ? 0.8 : 0.55,
                 line: {width: 1, color: "#333"}},
        error_x: {type: "data", symmetric: false, array: [p.blind_gap_hi - p.blind_gap],
                  arrayminus: [p.blind_gap - p.blind_gap_lo], color},
        error_y: {type: "data", symmetric: false, array: [p.visual_gain_hi - p.visual_gain],
                  arrayminus: [p.visual_gain - p.visual_gain_lo], color},
      });
    }
  });
  const live = D.benchmarks.map((b, i) => [b, atTau(i, tau, m)]).filter(([, r]) => !Number.isNaN(r.vg));
  traces.push({name: `grounded at τ = ${tau} (point estimate)`, type: "scatter", mode: "markers+text",
               x: live.map(([, r]) => r.bg), y: live.map(([, r]) => r.vg), text: live.map(([b]) => plotText(b.title)),
               textposition: "top center", marker: {symbol: "diamond-open", size: 14, color: "#111", line: {width: 2}},
               meta: {live: true},
               hovertemplate: "%{text}: BG %{x:.1f}, VG %{y:.1f}<extra>τ = " + tau + "</extra>"});
  Plotly.react("space", traces, {
    margin: {t: 30, r: 10}, xaxis: {title: {text: "Blind Gap (%) ↓"}, zeroline: true},
    yaxis: {title: {text: "Visual Gain (%) ↑"}, zeroline: true}, legend: {orientation: "h", y: -0.18},
    title: {text: m < 0 ? "mean of the evaluation VLMs" : plotText(D.models[m].label), font: {size: 14}}}, {displaylogo: false});
  updateTauTable(tau, m);
  drawSweeps(tau, m);
}
function updateTauTable(tau, m) {
  const body = document.querySelector("#tau-table tbody");
  body.innerHTML = "";
  D.benchmarks.forEach((b, i) => {
    const r = atTau(i, tau, m), g = auditPoint(i, "grounded", m);
    const interval = (p, metric) => p ? `${pct(p[metric])} [${pct(p[metric + "_lo"])}, ${pct(p[metric + "_hi"])}]` : "–";
    const row = body.insertRow();
    row.innerHTML = `<td>${esc(b.title)}</td><td id="kept-${esc(b.name)}">${r.n}</td><td>${b.n}</td>` +
      `<td id="bg-${esc(b.name)}">${pct(r.bg)}</td><td id="vg-${esc(b.name)}">${pct(r.vg)}</td>` +
      `<td>${interval(g, "blind_gap")}</td><td>${interval(g, "visual_gain")}</td>`;
  });
  document.getElementById("tau-note").textContent = `Kept: questions with S(q) ≤ τ = ${tau}. BG and VG at τ are ` +
    `point estimates; intervals are those of the audit, at its τ = ${D.tau}.`;
}
function sweepOf(b, signal, m) {
  const rows = D.sweeps.filter(s => s.benchmark === D.benchmarks[b].name && s.signal === signal);
  const members = m < 0 ? D.benchmarks[b].mean_of : [m];
  const mine = rows.filter(s => members.includes(s.model));
  if (!mine.length) return null;
  const mean = key => mine[0][key].map((_, j) => mine.reduce((a, s) => a + (s[key][j] ?? NaN), 0) / mine.length);
  return {tau: mine[0].tau, n_kept: mine[0].n_kept, bg: mean("blind_gap"), vg: mean("visual_gain")};
}
function drawSweeps(tau, m) {
  const holder = document.getElementById("sweeps"), signal = signalSelect.value;
  D.benchmarks.forEach((b, i) => {
    let div = document.getElementById("sweep-" + b.name);
    if (!div) {
      div = document.createElement("div");
      div.id = "sweep-" + b.name; div.style.width = "460px"; div.style.height = "320px";
      holder.appendChild(div);
    }
    const s = sweepOf(i, signal, m);
    if (!s) { div.textContent = `${b.title}: no sweep of ${signal}`; return; }
    Plotly.react(div, [
      {name: "Blind Gap", x: s.tau, y: s.bg, mode: "lines"}, {name: "Visual Gain", x: s.tau, y: s.vg, mode: "lines"},
      {name: "kept", x: s.tau, y: s.n_kept, mode: "lines", yaxis: "y2", line: {dash: "dot", color: "#888"}}],
      {title: {text: `${plotText(b.title)}: keep ${plotText(signal)} ≤ τ`, font: {size: 13}}, margin: {t: 30, r: 40, b: 40},
       xaxis: {title: {text: "τ"}}, yaxis: {title: {text: "%"}},
       yaxis2: {overlaying: "y", side: "right", title: {text: "kept"}, showgrid: false},
       shapes: signal === "S" ? [{type: "line", x0: tau, x1: tau, yref: "paper", y0: 0, y1: 1, line: {color: "#c33"}}] : [],
       legend: {orientation: "h", y: -0.25}}, {displaylogo: false});
  });
}
function setTau(value) {
  tauInput.value = value; tauRange.value = value;
  drawSpace();
}
tauRange.addEventListener("input", () => setTau(tauRange.value));
tauInput.addEventListener("input", () => { if (!Number.isNaN(currentTau())) { tauRange.value = tauInput.value; drawSpace(); } });
modelSelect.addEventListener("change", drawSpace);
signalSelect.addEventListener("change", drawSpace);

// ---------------------------------------------------------------- the questions
const DataTable = window.DTBundle.default;
const decisionText = v => v === 1 ? "kept" : v === 0 ? "removed" : "–";
const numberCell = d => (v, type) => type === "display" || type === "filter" ? fmt(v, d) : (v === null ? -Infinity : v);
const rows = new Array(N);
for (let q = 0; q < N; q++) {
  const num = x => Number.isNaN(x) ? null : x;
  rows[q] = [q, benchName(col.bench[q]), Q.question_id[q], category(q) ?? "", questionText(q) || "",
             options(q).map((o, j) => `${LETTERS[j]}. ${o}`).join(" · "), LETTERS[col.answer[q]],
             num(col.T[q]), num(col.V[q]), num(col.S[q]), num(col.s_tst[q]), num(col.V_order[q]),
             decisionText(col.grounded[q]), decisionText(col.temporal[q]), decisionText(col.kept_llm_inspector[q]),
             decisionText(col.kept_b_clean[q])];
}
// A text cell: shown escaped (clipped to `n` characters), searched as typed. DataTables' search joins a row's
// cells into one string matched by "." patterns, which stop at a line or paragraph separator, so the search data
// (and the typed text: `searchBox` below) hold a space for each; it drops every '"' of the words searched for, so
// the data drops them too; and it reads search data holding "&" through innerHTML, so it gets it escaped (which
// reads back as the text). Type "string": an "html" column's search data would lose what looks like a tag.
const SEPARATORS = /[\r\n\u2028\u2029]/g;
const searchable = v => esc(String(v ?? "").replace(SEPARATORS, " ").replace(/"/g, ""));
const textCell = n => ({type: "string", render: (v, type) => type === "display" ? esc(n ? clip(v, n) : v)
  : type === "filter" ? searchable(v) : v});
const columns = [
  {title: "#", visible: false}, {title: "benchmark", ...textCell()}, {title: "id", ...textCell()},
  {title: "category", ...textCell()}, {title: "question", className: "text", ...textCell(200)},
  {title: "options", className: "text", ...textCell(120)},
  {title: "answer", ...textCell()}, {title: "T", render: numberCell(3)}, {title: "V", render: numberCell(3)},
  {title: "S", render: numberCell(3)}, {title: "TsT s(x)", render: numberCell(3), visible: Q.has_s_tst},
  {title: "V_order", render: numberCell(3), visible: Q.has_ladder},
  {title: "S-score", ...textCell()}, {title: "temporal", ...textCell(), visible: Q.has_ladder},
  {title: "LLM-Inspector", ...textCell()}, {title: "B-Clean", ...textCell()}];
const fBench = document.getElementById("f-benchmark"), fCat = document.getElementById("f-category");
const fDecision = document.getElementById("f-decision");
const fSmin = document.getElementById("f-smin"), fSmax = document.getElementById("f-smax");
D.benchmarks.forEach((b, i) => fBench.add(new Option(b.title, String(i))));
[...Q.category[0]].sort().forEach(c => fCat.add(new Option(c, c)));
DataTable.ext.search.push((settings, data, index) => {
  if (settings.nTable.id !== "questions-table") return true;
  const q = rows[index][0];
  if (fBench.value !== "" && col.bench[q] !== parseInt(fBench.value)) return false;
  if (fCat.value !== "" && category(q) !== fCat.value) return false;
  if (fDecision.value !== "") {
    const [name, value] = fDecision.value.split(":");
    if (col[name][q] !== parseInt(value)) return false;
  }
  const smin = parseFloat(fSmin.value), smax = parseFloat(fSmax.value);
  if (!Number.isNaN(smin) && !(col.S[q] >= smin)) return false;
  if (!Number.isNaN(smax) && !(col.S[q] <= smax)) return false;
  return true;
});
// before DataTables reads the search box (a listener of the box's own): a pasted line or paragraph separator as the
// space its search data holds
document.addEventListener("input", event => {
  const box = event.target;
  if (!(box.closest && box.closest("#view-questions") && box.type === "search")) return;
  const typed = box.value.replace(SEPARATORS, " ");
  if (typed !== box.value) box.value = typed;
}, true);
const table = new DataTable("#questions-table", {
  data: rows, columns, deferRender: true, pageLength: 25, order: [[9, "desc"]], autoWidth: false,
  language: {search: "Search text:"},
});
for (const el of [fBench, fCat, fDecision]) el.addEventListener("change", () => table.draw());
for (const el of [fSmin, fSmax]) el.addEventListener("input", () => table.draw());
document.querySelector("#questions-table tbody").addEventListener("click", event => {
  const tr = event.target.closest("tr");
  if (!tr) return;
  const data = table.row(tr).data();
  if (data) openQuestion(data[0]);
});

// ---------------------------------------------------------------- one question
function openQuestion(q) {
  document.getElementById("q-empty").style.display = "none";
  document.getElementById("q-body").style.display = "block";
  const b = D.benchmarks[col.bench[q]], k = col.k[q], answer = col.answer[q];
  document.getElementById("q-title").textContent = `${b.title} · ${Q.question_id[q]}` +
    (category(q) ? ` · ${category(q)}` : "") + (video(q) ? ` · ${video(q)}` : "");
  document.getElementById("q-text").textContent = questionText(q) || "(the runs logged no prompt for this question)";
  document.getElementById("q-options").innerHTML = options(q).map((o, j) =>
    `<li class="${j === answer ? "answer" : ""}">${esc(o)}${j === answer ? " ✓" : ""}</li>`).join("");
  document.getElementById("q-scores").innerHTML = `T = ${fmt(col.T[q])}, V = ${fmt(col.V[q])}, S = ${fmt(col.S[q])}` +
    (Q.has_s_tst ? `, TsT s(x) = ${fmt(col.s_tst[q])}` : "") + ` · S-score: ${decisionText(col.grounded[q])} (τ = ${D.tau})` +
    ` · LLM-Inspector: ${decisionText(col.kept_llm_inspector[q])} · B-Clean: ${decisionText(col.kept_b_clean[q])}` +
    (Q.has_ladder ? ` · V_frame = ${fmt(col.V_frame[q])}, V_order = ${fmt(col.V_order[q])}, temporal: ` +
                    `${decisionText(col.temporal[q])} (V_order ≥ ${D.tau_order})` : "");
  const start = col.offsets[q];
  let html = "<tr><th>model</th><th>role</th><th>input</th>" +
    [...Array(k).keys()].map(j => `<th class="${j === answer ? "answer" : ""}">${LETTERS[j]}</th>`).join("") + "</tr>";
  // each model's rows, its temporal ladder among them: blind, one frame, shuffled, reversed, then the video
  const RUNGS = {single: "one frame", shuffled: "shuffled", reversed: "reversed"};
  const rungsOf = i => D.models.map((c, j) => [c, j]).filter(([c]) => c.ladder_of === i)
    .sort(([a], [b]) => Object.keys(RUNGS).indexOf(a.rung) - Object.keys(RUNGS).indexOf(b.rung));
  D.models.forEach((m, i) => {
    if (m.ladder_of !== undefined) return;  // shown with its full-video model
    const shown = [[m, i, "blind", "blind"], ...rungsOf(i).map(([c, j]) => [c, j, "video", RUNGS[c.rung]]),
                   [m, i, "video", "video"]];
    for (const [model, index, mode, input] of shown) {
      const a = answers[index] && answers[index][mode];
      if (!a || a.p[start] === 255) continue;
      html += `<tr><td>${esc(m.label)}</td><td>${esc(m.role)}</td><td>${input}</td>` + [...Array(k).keys()].map(j =>
        `<td class="p${a.pick[q] === j ? " pick" : ""}" data-model="${esc(model.name)}" data-mode="${mode}" data-option="${j}">` +
        `${(a.p[start + j] / 100).toFixed(2)}</td>`).join("") + "</tr>";
    }
  });
  document.getElementById("q-probs").innerHTML = html;
  const termTable = (signal, heading) => {
    let t = `<tr><th>model</th><th>${heading}</th></tr>`, sum = 0, n = 0;
    for (const i of (signal === "T" ? b.T : b.V)) {
      const v = terms[signal][i] ? terms[signal][i][q] : -32768;
      if (v === -32768) continue;
      t += `<tr><td>${esc(D.models[i].label)}</td><td>${(v / 10000).toFixed(4)}</td></tr>`;
      sum += v / 10000; n++;
    }
    const exact = signal === "V" || D.textual_evidence === "paper";  // the audit's value, not a mean of rounded terms
    return [t + `<tr><th>${signal}(q)</th><th>${exact ? fmt(col[signal][q], 4) : (n ? (sum / n).toFixed(4) : "–")}</th></tr>`, n];
  };
  const [tHtml] = termTable("T", "[correct] · (1 − H_norm)");
  document.getElementById("q-t").innerHTML = tHtml;
  document.getElementById("q-t-note").textContent = D.textual_evidence === "paper"
    ? `T(q): the mean of these terms over the text panel (the paper's eq. 3).`
    : `T(q) = ${fmt(col.T[q], 4)} uses --textual-evidence ${D.textual_evidence}; the paper's per-model terms are shown for reference.`;
  const [vHtml] = termTable("V", "(P(y*|video) − P(y*|blind)) / (1 − 1/K)");
  document.getElementById("q-v").innerHTML = vHtml;
  document.getElementById("q-v-note").textContent = `V(q): the mean of these terms over the V panel.`;
  const frames = document.getElementById("q-frames");
  if (sheet(q)) {
    frames.innerHTML = `<img id="q-sheet" loading="lazy" alt="frames of ${esc(video(q))}" src="${esc(sheet(q))}">` +
      `<p class="note">${esc(D.frames.note)}</p>`;
  } else {
    const note = D.frames.note.startsWith("videos not available") ? D.frames.note
      : `videos not available for this question (${D.frames.note})`;
    frames.innerHTML = `<p id="q-no-frames">${esc(note)}</p>`;
  }
  show("question");
}
window.explorer = {setTau, openQuestion, table, show};
drawSpace();
document.body.dataset.ready = "1";
