// gridledger console: plain JavaScript over the /v1 API, with the tenant's bearer token.
// The token is asked for once and kept in localStorage; every request sends it, so the
// console sees exactly what the token's tenant may see.
"use strict";

const GL = (() => {
  const TOKEN_KEY = "gridledger.token";
  const TERMINAL = new Set(["succeeded", "succeeded_with_errors", "failed", "cancelled", "rejected"]);
  const ACTIVE = ["submitted", "queued", "scheduled", "starting", "running", "finishing",
                  "lost_contact", "retrying"];
  const LABELS = {
    lost_contact: "lost contact", succeeded_with_errors: "succeeded with errors",
    lost: "lost", ended: "released",
  };
  const DECISIONS = new Set(["FailureClassified", "RetryScheduled", "JobSucceeded", "JobFailed",
    "JobCancelled", "JobRejected", "JobSucceededWithErrors", "AttemptLost", "DispatchTimedOut",
    "FinishingTimedOut", "NoCapacity"]);

  class Unauthorized extends Error {}

  const token = () => localStorage.getItem(TOKEN_KEY) || "";

  async function api(path, options = {}) {
    const headers = { Authorization: `Bearer ${token()}`, Accept: "application/json",
                      ...(options.headers || {}) };
    const response = await fetch(path, { ...options, headers });
    if (response.status === 401) throw new Unauthorized("token not accepted");
    return response;
  }

  // What a refusal says: the problem document's detail, else its status.
  async function problemDetail(response) {
    try { const body = await response.json(); return body.detail || body.error || `${response.status}`; }
    catch (_) { return `${response.status} ${response.statusText}`.trim(); } // not JSON
  }

  async function getJSON(path) {
    const response = await api(path);
    if (!response.ok) {
      const error = new Error(await problemDetail(response));
      error.status = response.status;
      throw error;
    }
    return response.json();
  }

  // ------------------------------------------------------------------ elements

  function el(tag, attrs = {}, ...children) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs)) {
      if (v === null || v === undefined || v === false) continue;
      if (k === "class") node.className = v;
      else if (k === "style") node.style.cssText = v; // CSSOM: allowed by the CSP
      else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
      else if (k === "dataset") Object.assign(node.dataset, v);
      else node.setAttribute(k, v === true ? "" : v);
    }
    for (const child of children.flat()) {
      if (child === null || child === undefined || child === false) continue;
      node.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return node;
  }

  const colour = (state) => `--c: var(--s-${state}, var(--s-other))`;
  const label = (state) => LABELS[state] || state;

  function pill(state, big = false) {
    const live = !TERMINAL.has(state) && state !== "ended" && state !== "lost";
    return el("span", { class: `pill${big ? " big" : ""}${live ? " live" : ""}`,
                        style: colour(state), dataset: { status: state } }, label(state));
  }

  // ------------------------------------------------------------------ time

  const zone = Intl.DateTimeFormat().resolvedOptions().timeZone;
  const timeFmt = new Intl.DateTimeFormat(undefined, {
    year: "numeric", month: "short", day: "2-digit", hour: "2-digit", minute: "2-digit",
    second: "2-digit", timeZoneName: "short" });
  const clockFmt = new Intl.DateTimeFormat(undefined, {
    hour: "2-digit", minute: "2-digit", second: "2-digit", fractionalSecondDigits: 3, hour12: false });

  const parse = (iso) => (iso ? new Date(iso) : null);
  const local = (iso) => (iso ? timeFmt.format(parse(iso)) : "");
  const clock = (iso) => (iso ? clockFmt.format(parse(iso)) : "");

  function duration(seconds) {
    if (seconds === null || seconds === undefined || Number.isNaN(seconds)) return "";
    if (seconds < 1) return `${Math.round(seconds * 1000)} ms`;
    if (seconds < 120) return `${seconds.toFixed(1)} s`;
    const m = Math.floor(seconds / 60), s = Math.floor(seconds % 60);
    if (m < 120) return `${m}m ${String(s).padStart(2, "0")}s`;
    return `${Math.floor(m / 60)}h ${String(m % 60).padStart(2, "0")}m`;
  }

  function ago(iso) {
    if (!iso) return "";
    const s = (Date.now() - parse(iso).getTime()) / 1000;
    if (s < 5) return "just now";
    if (s < 90) return `${Math.round(s)} s ago`;
    if (s < 5400) return `${Math.round(s / 60)} min ago`;
    if (s < 129600) return `${Math.round(s / 3600)} h ago`;
    return `${Math.round(s / 86400)} d ago`;
  }

  const when = (iso) => el("span", { title: local(iso) }, ago(iso));

  // ------------------------------------------------------------------ shell

  function shell(active) {
    const signedIn = Boolean(token());
    const bar = el("header", { class: "topbar" },
      el("a", { class: "brand", href: "/console" }, el("span", { class: "mark" }), "gridledger"),
      el("nav", {},
        el("a", { href: "/console", class: active === "jobs" ? "active" : "",
                  "aria-current": active === "jobs" ? "page" : null }, "Jobs"),
        el("a", { href: "/console/fleet", class: active === "fleet" ? "active" : "",
                  "aria-current": active === "fleet" ? "page" : null }, "Fleet"),
        el("a", { href: "/openapi.json" }, "API")),
      el("div", { class: "who" },
        signedIn ? el("span", {}, "token ", el("code", {}, `${token().slice(0, 6)}…`)) : null,
        signedIn ? el("button", { id: "signout", onclick: signOut }, "Change token") : null));
    document.body.prepend(bar);
  }

  function signOut() {
    localStorage.removeItem(TOKEN_KEY);
    location.reload();
  }

  function signIn(main, why = "") {
    main.replaceChildren(el("div", { class: "panel signin" },
      el("h1", {}, "Sign in with your API token"),
      el("p", {}, "The console uses the same bearer tokens as the CLI and shows only your " +
        "tenant's jobs. The token stays in this browser (localStorage) and is sent as the bearer."),
      el("p", {}, "On a dev machine, ", el("code", {}, "gridledger dev up"), " writes the tokens to ",
        el("code", {}, ".gridledger/tokens.json"), "."),
      el("label", { for: "token", class: "field" }, "API token"),
      el("form", { id: "signin", onsubmit: (event) => {
          event.preventDefault();
          const value = document.getElementById("token").value.trim();
          if (!value) return;
          localStorage.setItem(TOKEN_KEY, value);
          location.reload();
        } },
        el("input", { type: "password", id: "token", placeholder: "paste your token",
                      autocomplete: "off", "aria-describedby": "token-why" }),
        el("button", { class: "primary", type: "submit" }, "Sign in")),
      el("div", { class: "error", id: "token-why", role: "alert" }, why)));
  }

  async function guarded(main, run) {
    if (!token()) { signIn(main); return; }
    try { await run(); }
    catch (error) {
      if (error instanceof Unauthorized) signIn(main, "That token was not accepted; try another.");
      else main.prepend(el("div", { class: "banner" }, `Could not load: ${error.message}`));
    }
  }

  // Calls fn every ms until it returns false, but never while the tab is hidden: a hidden
  // tab asks nothing (document.visibilityState), and refreshes at once when shown again.
  function poll(fn, ms) {
    let stopped = false;
    let timer = null;
    let missed = false;
    const stop = () => {
      stopped = true;
      clearTimeout(timer);
      document.removeEventListener("visibilitychange", shown);
    };
    const tick = async () => {
      timer = null;
      if (stopped) return;
      if (document.visibilityState === "hidden") { missed = true; return; }
      try { if ((await fn()) === false) { stop(); return; } }
      catch (error) { if (error instanceof Unauthorized) { stop(); return; } }
      if (!stopped) timer = setTimeout(tick, ms);
    };
    function shown() {
      if (document.visibilityState !== "visible" || !missed || stopped) return;
      missed = false;
      tick();
    }
    document.addEventListener("visibilitychange", shown);
    timer = setTimeout(tick, ms);
    return stop;
  }

  // A button that copies a job id (the Clipboard API, or a selection where the page is
  // not a secure context), and says that it did.
  function copyButton(text, what = "job id") {
    const button = el("button", { class: "copy", type: "button", title: `Copy the ${what}`,
      "aria-label": `Copy the ${what} ${text}`, dataset: { copy: text } }, "Copy");
    button.addEventListener("click", async () => {
      let ok = false;
      try {
        if (navigator.clipboard && window.isSecureContext) {
          await navigator.clipboard.writeText(text);
          ok = true;
        } else {
          const area = el("textarea", { "aria-hidden": "true", style: "position:fixed; opacity:0" }, text);
          document.body.append(area);
          area.select();
          ok = document.execCommand("copy");
          area.remove();
        }
      } catch (_) { ok = false; }
      // The focused button's name changes too, so a screen reader says it as well.
      const name = button.getAttribute("aria-label");
      button.textContent = ok ? "Copied ✓" : "Copy failed";
      button.setAttribute("aria-label", ok ? `Copied the ${what} ${text}` : `Could not copy the ${what}`);
      setTimeout(() => { button.textContent = "Copy"; button.setAttribute("aria-label", name); }, 2000);
    });
    return button;
  }

  // A polite live region: says what changed, and only when something did.
  function announcer(id, cls = "announce") {
    const region = el("p", { class: cls, id, role: "status", "aria-live": "polite" });
    region.say = (text) => { if (text && region.textContent !== text) region.textContent = text; };
    return region;
  }

  // ------------------------------------------------------------------ jobs page

  const FILTERS = [
    ["all", "All", []], ["active", "Active", ACTIVE], ["succeeded", "Succeeded", ["succeeded"]],
    ["failed", "Failed", ["failed", "succeeded_with_errors"]], ["cancelled", "Cancelled", ["cancelled"]],
    ["rejected", "Rejected", ["rejected"]],
  ];

  function jobRow(job) {
    const ran = job.terminal_at && job.submitted_at
      ? (parse(job.terminal_at) - parse(job.submitted_at)) / 1000 : null;
    return el("tr", { dataset: { job: job.job_id, attempt: job.attempt } },
      el("td", {}, pill(job.status)),
      el("td", {}, el("a", { href: `/console/jobs/${job.job_id}`, class: "jobname" }, job.name || job.job_id),
        el("div", { class: "jobid" }, el("span", { class: "mono faint" }, job.job_id), copyButton(job.job_id))),
      el("td", { class: "mono muted" }, job.image),
      el("td", { class: "num" }, job.gpus),
      el("td", { class: "num" }, job.attempt),
      el("td", {}, when(job.submitted_at)),
      el("td", { class: "num muted" }, ran === null ? "" : duration(ran)),
      el("td", {}, job.failure_class ? el("div", {}, el("code", {}, job.failure_class),
        el("span", { class: "faint" }, ` · ${job.attribution}`)) : null,
        job.summary ? el("div", { class: "summary" }, job.summary) : null));
  }

  async function jobs() {
    shell("jobs");
    const main = document.querySelector("main");
    await guarded(main, async () => {
      const params = new URLSearchParams(location.search);
      let filter = params.get("filter") || "all";
      const tbody = el("tbody", { id: "jobs" });
      const more = el("button", { id: "more", style: "display:none" }, "Load more");
      const note = el("span", { class: "live-note", id: "live" }, "");
      const changes = announcer("changes");
      const seen = new Map();
      let cursor = null;
      const chips = FILTERS.map(([key, text]) => el("button", {
        class: `chip${key === filter ? " on" : ""}`, dataset: { filter: key },
        "aria-pressed": String(key === filter),
        onclick: () => { filter = key; history.replaceState(null, "", `?filter=${key}`);
          for (const c of chips) {
            c.classList.toggle("on", c.dataset.filter === key);
            c.setAttribute("aria-pressed", String(c.dataset.filter === key));
          }
          load(true); } }, text));
      main.replaceChildren(
        el("h1", {}, "Jobs"),
        el("p", { class: "sub" }, "Your tenant's jobs, newest first. States update live."),
        el("div", { class: "filters" }, chips, el("span", { class: "spacer" }), note),
        changes,
        el("div", { class: "panel", style: "padding:6px 10px" },
          el("table", {}, el("thead", {}, el("tr", {},
            ["Status", "Job", "Image", "GPUs", "Att.", "Submitted", "Took", "Failure"].map(
              (h, i) => el("th", { class: [3, 4, 6].includes(i) ? "num" : "" }, h)))), tbody)),
        more);

      const query = (extra = "") => {
        const statuses = FILTERS.find(([k]) => k === filter)[2];
        const q = new URLSearchParams({ limit: "25" });
        for (const s of statuses) q.append("status", s);
        return `/v1/jobs?${q}${extra}`;
      };
      async function load(reset) {
        const page = await getJSON(query(!reset && cursor ? `&cursor=${cursor}` : ""));
        if (reset) tbody.replaceChildren();
        for (const job of page.jobs) { tbody.append(jobRow(job)); seen.set(job.job_id, job.status); }
        if (!tbody.children.length) {
          tbody.append(el("tr", {}, el("td", { colspan: 8, class: "empty" },
            "No jobs here. Submit one with ", el("code", {}, "gridledger submit examples/hello.yaml"), ".")));
        }
        cursor = page.next_cursor;
        more.style.display = cursor ? "" : "none";
      }
      more.addEventListener("click", () => load(false));
      await load(true);
      // Live status: refresh the rows already shown (first page) every few seconds.
      poll(async () => {
        const page = await getJSON(query());
        const news = [];
        for (const job of page.jobs) {
          const before = seen.get(job.job_id);
          if (before && before !== job.status) news.push(`${job.name || job.job_id}: ${label(before)} → ${label(job.status)}`);
          seen.set(job.job_id, job.status);
          const row = tbody.querySelector(`tr[data-job="${job.job_id}"]`);
          if (row) row.replaceWith(jobRow(job));
          else if (!tbody.querySelector("td.empty")) tbody.prepend(jobRow(job));
          else { tbody.replaceChildren(jobRow(job)); }
        }
        note.textContent = `live · updated ${clockFmt.format(new Date()).slice(0, 8)}`;
        changes.say(news.join("; "));
      }, 2500);
    });
  }

  // ------------------------------------------------------------------ job page

  function fact(k, v, small = "") {
    return el("div", { class: "fact" }, el("div", { class: "k" }, k),
      el("div", { class: "v" }, v, small ? el("small", {}, ` ${small}`) : null));
  }

  function explainBlock(text) {
    const pre = el("pre", { class: "explain", id: "explain" });
    for (const line of text.split("\n")) {
      if (/^[A-Z][A-Za-z ]+$/.test(line)) pre.append(el("span", { class: "h" }, line), "\n");
      else if (/^\s+> /.test(line)) pre.append(el("span", { class: "q" }, line), "\n");
      else pre.append(line, "\n");
    }
    return pre;
  }

  // Time -> x (percent). The scale is linear between the moments a state changes, but each
  // of those steps gets at least a minimum share of the width, so a 5 ms "queued" stays as
  // readable as a 10-minute "running"; a finished job keeps room at the end for its outcome.
  function scale(times, endPad) {
    const ts = [...new Set(times.map((t) => t.getTime()))].sort((a, b) => a - b);
    if (ts.length < 2) ts.push((ts[0] || 0) + 1000);
    const total = ts[ts.length - 1] - ts[0] || 1;
    const weights = ts.slice(1).map((t, i) => Math.max(t - ts[i], total * 0.07));
    const steps = weights.reduce((a, b) => a + b, 0);
    const sum = steps + (endPad ? steps * 0.15 : 0);
    const xs = [0];
    for (const w of weights) xs.push(xs[xs.length - 1] + (w / sum) * 100);
    const x = (date) => {
      const t = date.getTime();
      if (t <= ts[0]) return 0;
      for (let i = 1; i < ts.length; i++) {
        if (t <= ts[i]) return xs[i - 1] + ((t - ts[i - 1]) / (ts[i] - ts[i - 1] || 1)) * (xs[i] - xs[i - 1]);
      }
      return xs[xs.length - 1];
    };
    return x;
  }

  const SHORT = {
    submitted: "sub", queued: "queue", scheduled: "sched", starting: "start", running: "run",
    finishing: "fin", lost_contact: "lost?", retrying: "retry", succeeded: "✓",
    succeeded_with_errors: "✓ !", failed: "✗", cancelled: "⊘", rejected: "✗", lost: "lost",
    ended: "rel",
  };
  const WINDOW_NAMES = { lost_contact: "lost contact", finishing: "finishing", backoff: "retry backoff" };

  function renderTimeline(tl, job) {
    const now = new Date();
    const times = [];
    for (const lane of tl.lanes) {
      for (const s of lane.segments) { times.push(parse(s.start)); if (s.end) times.push(parse(s.end)); }
    }
    for (const w of tl.windows) { times.push(parse(w.start)); if (w.end) times.push(parse(w.end)); }
    if (!tl.terminal) times.push(now);
    const x = scale(times.length ? times : [now], tl.terminal);
    const t0 = tl.start ? parse(tl.start) : now;
    const box = el("div", { class: "timeline", id: "timeline" });
    const segEl = (s, last, isJob) => {
      // A finished lane ends in a point, its outcome: the job's is drawn to the right edge
      // (nothing follows it), an attempt's as a short cap where it happened.
      const point = s.end && s.end === s.start;
      const a = x(parse(s.start));
      const b = point ? (isJob ? 100 : Math.min(100, a + 7)) : s.end ? x(parse(s.end)) : x(now);
      const secs = ((s.end ? parse(s.end) : now) - parse(s.start)) / 1000;
      const cls = `seg${point ? " outcome" : ""}${!s.end && last ? " open" : ""}`;
      return el("div", { class: cls, style: `${colour(s.state)}; left:${a}%; width:${Math.max(b - a, 0.6)}%`,
        dataset: { state: s.state, short: SHORT[s.state] || "" },
        title: `${label(s.state)} · from ${clock(s.start)}${point ? "" : ` · ${duration(secs)}`}` },
        label(s.state));
    };
    for (const lane of tl.lanes) {
      const attempt = (job.attempts || []).find((a) => a.attempt === lane.attempt);
      const gpu = attempt && attempt.gpu_model
        ? `${attempt.gpu_count}× ${attempt.gpu_model.replace("NVIDIA ", "")}` : "";
      const title = lane.key === "job"
        ? el("div", {}, el("b", {}, "job"), el("div", { class: "faint" }, "state"))
        : el("div", {}, el("b", {}, lane.label),
            el("div", { class: "faint" }, [lane.node_id, gpu].filter(Boolean).join(" · ")));
      box.append(el("div", { class: "lane", dataset: { lane: lane.key } },
        el("div", { class: "label" }, title),
        el("div", { class: "track" }, lane.segments.map((s, i) => segEl(s, i === lane.segments.length - 1, lane.key === "job")))));
    }
    if (tl.windows.length) {
      box.append(el("div", { class: "lane", dataset: { lane: "windows" } },
        el("div", { class: "label" }, el("div", {}, el("b", {}, "bounded waits"),
          el("div", { class: "faint" }, "deadline-bound"))),
        el("div", { class: "track" }, tl.windows.map((w) => {
          const a = x(parse(w.start)), b = x(w.end ? parse(w.end) : now);
          const secs = ((w.end ? parse(w.end) : now) - parse(w.start)) / 1000;
          const name = WINDOW_NAMES[w.kind];
          return el("div", { class: `window ${w.kind}`,
            dataset: { window: w.kind, outcome: w.outcome,
                       short: `${duration(secs)} → ${w.outcome}|${duration(secs)}` },
            style: `left:${a}%; width:${Math.max(b - a, 0.8)}%`,
            title: `${name} (attempt ${w.attempt}) · ${duration(secs)} · ${w.outcome}` +
              (w.deadline ? ` · deadline ${local(w.deadline)}` : "") },
            `${name} ${duration(secs)} → ${w.outcome}`);
        }))));
    }
    box.append(el("div", { class: "lane events", dataset: { lane: "events" } },
      el("div", { class: "label" }, el("div", {}, el("b", {}, "events"), el("div", { class: "faint" }, `${tl.events.length} recorded`))),
      el("div", { class: "track" },
        tl.events.map((e) => el("div", { class: `tick${DECISIONS.has(e.type) ? " decision" : ""}`,
          style: `left:${x(parse(e.occurred_at))}%`, dataset: { type: e.type },
          title: `#${e.seq} ${e.type} · attempt ${e.attempt} · ${clock(e.occurred_at)} → ${label(e.job_status)}` })))));
    const axis = el("div", { class: "axis" });
    let lastX = -100;
    const marks = [...new Set(times.map((t) => t.getTime()))].sort((a, b) => a - b);
    for (const t of marks) {
      const at = x(new Date(t));
      if (at - lastX < 7) continue;
      lastX = at;
      const shift = at < 4 ? "0" : at > 94 ? "-100%" : "-50%";
      axis.append(el("span", { style: `left:${at}%; transform:translateX(${shift})` }, t === t0.getTime() ? clock(tl.start).slice(0, 8) : `+${duration((t - t0.getTime()) / 1000)}`));
    }
    box.append(axis);
    const seen = [...new Set(tl.lanes.flatMap((l) => l.segments.map((s) => s.state)))];
    box.append(el("div", { class: "legend" }, seen.map((s) => el("span", {}, el("i", { style: colour(s) }), label(s))),
      el("span", { class: "faint" }, "· hover a bar or an event tick for its times; short steps are widened to stay readable")));
    return box;
  }

  function eventsTable(tl) {
    let prev = null;
    return el("table", { id: "events" }, el("thead", {}, el("tr", {},
      ["#", "Time", "Δ", "Att.", "Event", "Job state after"].map((h) => el("th", {}, h)))),
      el("tbody", {}, tl.events.map((e) => {
        const at = parse(e.occurred_at);
        const delta = prev ? (at - prev) / 1000 : null;
        prev = at;
        return el("tr", { dataset: { type: e.type } },
          el("td", { class: "faint" }, e.seq),
          el("td", { class: "mono", title: local(e.occurred_at) }, clock(e.occurred_at)),
          el("td", { class: "muted" }, delta === null ? "" : `+${duration(delta)}`),
          el("td", { class: "num" }, e.attempt || ""),
          el("td", {}, el("code", { style: DECISIONS.has(e.type) ? "font-weight:700" : "" }, e.type)),
          el("td", {}, pill(e.job_status)));
      })));
  }

  function accountingBlock(record) {
    if (!record || !record.attempts) return el("div", { class: "empty" }, "No accounting record yet.");
    const n = (v) => (v || 0).toFixed(1);
    return el("div", { id: "accounting" },
      el("div", { class: "muted", style: "margin-bottom:8px" },
        record.final ? `Final · policy ${record.policy_version}` : "Not final yet (the job still holds or may hold compute)",
        record.reconciled ? "" : " · lifecycle and meter disagree: held for review"),
      el("table", {}, el("thead", {}, el("tr", {},
        ["Att.", "Node", "GPUs", "Held", "GPU-s", "Metered", "Side", "Billable", "Credited"].map(
          (h, i) => el("th", { class: i >= 3 && i !== 6 ? "num" : "" }, h)))),
        el("tbody", {}, record.attempts.map((a) => el("tr", {},
          el("td", {}, a.attempt), el("td", { class: "mono" }, a.node_id || ""),
          el("td", {}, a.gpu_count ? `${a.gpu_count}× ${(a.gpu_model || "").replace("NVIDIA ", "")}` : ""),
          el("td", { class: "num" }, duration(a.held_seconds)), el("td", { class: "num" }, n(a.gpu_seconds)),
          el("td", { class: "num" }, n(a.metered_gpu_seconds)), el("td", {}, a.attribution || el("span", { class: "faint" }, "—")),
          el("td", { class: "num" }, n(a.billable_gpu_seconds)), el("td", { class: "num" }, n(a.credited_gpu_seconds)))),
          el("tr", { style: "font-weight:600" }, el("td", { colspan: 4 }, "total"),
            el("td", { class: "num" }, n(record.gpu_seconds)), el("td", { class: "num" }, n(record.metered_gpu_seconds)),
            el("td", {}, ""), el("td", { class: "num", id: "billable" }, n(record.billable_gpu_seconds)),
            el("td", { class: "num", id: "credited" }, n(record.credited_gpu_seconds))))));
  }

  async function outputsBlock(jobId) {
    // What the artifact store holds for the job (outputs and checkpoints of every attempt).
    let items = [];
    let retention = null;
    try {
      const response = await api(`/v1/jobs/${jobId}/artifacts`);
      if (response.ok) { const body = await response.json(); items = body.artifacts || []; retention = body.retention_days; }
    } catch (error) { if (error instanceof Unauthorized) throw error; }
    if (!items.length) return el("div", { class: "empty", id: "outputs" }, "None stored.");
    const size = (n) => (n >= 1 << 20 ? `${(n / (1 << 20)).toFixed(1)} MiB` : n >= 1024 ? `${(n / 1024).toFixed(1)} KiB` : `${n} B`);
    const download = (o) => el("button", { class: "link", onclick: async (event) => {
      event.target.disabled = true;
      const q = new URLSearchParams({ path: o.path, attempt: String(o.attempt) });
      try {
        const signed = await getJSON(`/v1/jobs/${jobId}/artifacts/url?${q}`);
        location.assign(signed.url);
      } catch (error) { event.target.replaceWith(el("span", { class: "error" }, error.message)); }
      event.target.disabled = false;
    } }, "download");
    return el("div", { id: "outputs" },
      el("table", {}, el("thead", {}, el("tr", {},
        ["Path", "Kind", "Att.", "Size", "SHA-256", ""].map((h, i) => el("th", { class: i === 3 ? "num" : "" }, h)))),
        el("tbody", {}, items.map((o) => el("tr", { dataset: { path: o.path } },
          el("td", { class: "mono", style: "white-space:nowrap" }, o.path), el("td", { class: "muted" }, o.kind),
          el("td", {}, o.attempt), el("td", { class: "num" }, size(o.bytes || 0)),
          el("td", { class: "mono faint", title: o.sha256 }, (o.sha256 || "").slice(0, 12)),
          el("td", {}, download(o)))))),
      retention ? el("div", { class: "faint", style: "margin-top:8px" }, `Kept ${retention} days after they were stored.`) : null);
  }

  function followLogs(jobId, pre, state) {
    const controller = new AbortController();
    let lines = 0;
    let lastAttempt = null;
    const setState = (text, on) => { state.replaceChildren(el("span", { class: `dot${on ? " on" : ""}` }), text); };
    (async () => {
      setState("following live", true);
      const response = await api(`/v1/jobs/${jobId}/logs?follow=true&format=ndjson`,
        { signal: controller.signal });
      const reader = response.body.getReader();
      const decoder = new TextDecoder();
      let buffer = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buffer += decoder.decode(value, { stream: true });
        let nl;
        while ((nl = buffer.indexOf("\n")) >= 0) {
          const line = buffer.slice(0, nl); buffer = buffer.slice(nl + 1);
          if (!line.trim()) continue;
          const item = JSON.parse(line);
          if (item.end) {
            pre.append(el("span", { class: "end" }, `— end of logs: job ${label(item.status || "")} —\n`));
            setState(`ended (${label(item.status || "")})`, false);
            continue;
          }
          if (item.data === undefined) continue; // keepalive
          const stick = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 24;
          if (item.attempt !== lastAttempt) {
            if (lastAttempt !== null || item.attempt > 1) {
              pre.append(el("span", { class: "system" }, `── attempt ${item.attempt} ──\n`));
            }
            lastAttempt = item.attempt;
          }
          pre.append(el("span", { class: item.stream, dataset: { attempt: item.attempt } }, item.data));
          if (item.truncated) pre.append(el("span", { class: "system" }, "[log quota reached; later output was dropped]\n"));
          lines += item.line_count || 0;
          pre.dataset.lines = String(lines);
          if (stick) pre.scrollTop = pre.scrollHeight;
        }
      }
    })().catch((error) => { if (error.name !== "AbortError") setState(`stopped: ${error.message}`, false); });
    return controller;
  }

  // "Cancel job" asks first (a modal dialog), then shows what the API answered: that the
  // cancel was requested, or the problem's detail (e.g. the job ended meanwhile).
  function cancelControl(jobId, current, result) {
    const what = el("p", { id: "confirm-what" });
    const dialog = el("dialog", { id: "confirm-cancel", "aria-labelledby": "confirm-title",
                                  "aria-describedby": "confirm-what" });
    const button = el("button", { class: "danger", id: "cancel", type: "button" }, "Cancel job");
    const keep = el("button", { type: "button", id: "keep", onclick: () => dialog.close() }, "Keep it running");
    const confirm = el("button", { type: "button", class: "danger", id: "confirm" }, "Cancel job");
    const say = (text, ok) => { result.className = `announce ${ok ? "ok" : "error"}`; result.textContent = text; };
    dialog.append(el("h2", { id: "confirm-title" }, "Cancel this job?"), what,
      el("div", { class: "actions" }, keep, confirm));
    button.addEventListener("click", () => {
      const doc = current();
      what.textContent = `${doc.name || doc.job_id} (${doc.job_id}, ${label(doc.status)}) will be stopped ` +
        "and end cancelled. This cannot be undone.";
      dialog.showModal();
      keep.focus();
    });
    confirm.addEventListener("click", async () => {
      confirm.disabled = true;
      try {
        const response = await api(`/v1/jobs/${jobId}/cancel`, { method: "POST",
          body: JSON.stringify({ reason: "cancelled from the console" }),
          headers: { "Content-Type": "application/json" } });
        if (response.ok) {
          await response.json();
          say("Cancel requested: the job is being stopped; its state above turns cancelled when it has.", true);
          update({ cancel_requested_at: true });
        } else {
          say(`Could not cancel: ${await problemDetail(response)}`, false);
        }
      } catch (error) {
        say(error instanceof Unauthorized ? "Could not cancel: the token was not accepted." : `Could not cancel: ${error.message}`, false);
      } finally {
        confirm.disabled = false;
        dialog.close();
      }
    });
    function update(doc) {
      button.hidden = Boolean(doc.terminal);
      if (doc.cancel_requested_at) { button.disabled = true; button.textContent = "Cancel requested"; }
    }
    return { button, dialog, update };
  }

  async function job() {
    shell("jobs");
    const main = document.querySelector("main");
    const jobId = decodeURIComponent(location.pathname.split("/").pop());
    await guarded(main, async () => {
      let doc;
      try { doc = await getJSON(`/v1/jobs/${jobId}`); }
      catch (error) {
        if (error.status === 404) {
          main.replaceChildren(el("div", { class: "panel signin" }, el("h1", {}, "No such job"),
            el("p", {}, `There is no job ${jobId} for your tenant.`), el("a", { href: "/console" }, "← all jobs")));
          return;
        }
        throw error;
      }
      document.title = `${doc.name || doc.job_id} · gridledger`;
      const status = el("span", { id: "status", role: "status", "aria-live": "polite" });
      const result = announcer("cancelresult");
      const cancel = cancelControl(jobId, () => doc, result);
      const spec = doc.spec || {};
      const res = spec.resources || {};
      const head = el("div", { class: "jobhead", id: "head" },
        el("div", {},
          el("h1", {}, doc.name || doc.job_id, " ", status),
          el("div", { class: "meta" }, el("span", { class: "jobid" }, el("span", { class: "mono" }, doc.job_id), copyButton(doc.job_id)),
            el("span", {}, "image ", el("code", {}, spec.image || "")),
            el("span", {}, `${res.gpus ?? 0} GPU(s)${(res.gpu_models || []).length ? ` · ${res.gpu_models.join(", ")}` : ""}`),
            el("span", {}, "submitted ", el("span", { title: local(doc.submitted_at) }, local(doc.submitted_at))),
            el("span", { class: "faint" }, `times in ${zone}`))),
        el("div", { class: "actions" }, cancel.button));
      const facts = el("div", { class: "facts", id: "facts" });
      const tlPanel = el("div", { class: "panel" }, el("h2", {}, "Lifecycle"), el("div", { id: "tl" }));
      const logs = el("pre", { class: "logs", id: "logs", dataset: { lines: "0" }, role: "log",
                               "aria-live": "polite", "aria-label": "Logs", tabindex: "0" });
      const logState = el("span", { class: "state", id: "logstate", role: "status", "aria-live": "polite" });
      const explainPanel = el("div", { class: "panel" }, el("h2", {}, "Explain"), el("div", { id: "explainbox" }));
      const accPanel = el("div", { class: "panel" }, el("h2", {}, "Accounting"), el("div", { id: "accbox" }));
      const outPanel = el("div", { class: "panel" }, el("h2", {}, "Outputs and checkpoints"), el("div", { id: "outbox" }));
      const evPanel = el("div", { class: "panel" }, el("h2", {}, "Every event"), el("div", { id: "evbox" }));
      main.replaceChildren(
        el("div", { class: "muted", style: "margin-bottom:6px" }, el("a", { href: "/console" }, "← Jobs")),
        head, result, cancel.dialog, facts, tlPanel,
        el("div", { class: "panel" }, el("div", { class: "loghead" }, el("h2", {}, "Logs"), logState), logs),
        el("div", { class: "grid2 wide-left", style: "margin-bottom:18px" }, explainPanel, outPanel),
        accPanel, evPanel);
      followLogs(jobId, logs, logState);

      async function refresh() {
        doc = await getJSON(`/v1/jobs/${jobId}`);
        const [tl, explained, record] = await Promise.all([
          getJSON(`/v1/jobs/${jobId}/timeline`), getJSON(`/v1/jobs/${jobId}/explain`),
          getJSON(`/v1/jobs/${jobId}/accounting`)]);
        // The status is a live region: it changes (and is announced) only when the state does.
        if (status.dataset.status !== doc.status) {
          status.dataset.status = doc.status;
          status.replaceChildren(pill(doc.status, true));
        }
        cancel.update(doc);
        const acc = doc.accounting || {};
        const started = parse(doc.submitted_at), ended = doc.terminal_at ? parse(doc.terminal_at) : new Date();
        facts.replaceChildren(
          fact("Elapsed", duration((ended - started) / 1000), doc.terminal ? "" : "so far"),
          fact("Attempts", String((doc.attempts || []).length), doc.failure && doc.failure.retryable ? "retryable" : ""),
          fact("Billable GPU-s", (acc.billable_gpu_seconds || 0).toFixed(1), acc.final ? "final" : "so far"),
          fact("Credited GPU-s", (acc.credited_gpu_seconds || 0).toFixed(1)));
        document.getElementById("tl").replaceChildren(renderTimeline(tl, doc));
        // A bar too narrow for its word gets the short form, then none (colour, legend and
        // tooltip still say what it is).
        for (const bar of document.querySelectorAll("#tl .seg, #tl .window")) {
          const overflows = () => bar.scrollWidth > bar.clientWidth + 1;
          for (const shorter of [...(bar.dataset.short || "").split("|"), ""]) {
            if (!overflows()) break;
            bar.textContent = shorter;
          }
        }
        document.getElementById("explainbox").replaceChildren(explainBlock(explained.text));
        document.getElementById("accbox").replaceChildren(accountingBlock(record));
        document.getElementById("outbox").replaceChildren(await outputsBlock(jobId));
        document.getElementById("evbox").replaceChildren(eventsTable(tl));
        document.body.dataset.status = doc.status;
        return !(doc.terminal && acc.final);
      }
      if (await refresh()) poll(refresh, 2000);
    });
  }

  // ------------------------------------------------------------------ fleet page

  // A GPU tile's state: its icon, and what it means (the tile also says the word).
  const GPU_STATES = {
    free: ["○", "free"], busy: ["●", "busy"], unknown: ["?", "node silent: state unknown"],
  };

  function nodeCard(node) {
    const free = new Set(node.free_gpu_indices);
    const silent = node.status !== "ready";
    const mine = node.your_attempts || [];
    return el("div", { class: "panel node", dataset: { node: node.node_id, status: node.status } },
      el("div", { class: "top" }, el("span", { class: "name" }, node.node_id), pill(node.status)),
      el("div", { class: "where" }, `${node.provider} · ${node.region}`),
      el("div", { class: "gpus" }, node.gpus.map((g) => {
        const state = silent ? "unknown" : free.has(g.index) ? "free" : "busy";
        const [icon, why] = GPU_STATES[state];
        return el("div", { class: `gpu ${state}`, dataset: { gpu: g.index, state },
          title: `GPU ${g.index}: ${g.model}, ${Math.round((g.memory_total_mb || 0) / 1024)} GiB (${why})` },
          el("span", { class: "i" }, `#${g.index}`),
          el("span", {}, el("span", { "aria-hidden": "true" }, `${icon} `), state));
      })),
      el("div", { class: "kv" },
        el("span", { class: "k" }, "GPUs"), el("span", {}, `${node.gpus.length}× ${[...new Set(node.gpus.map((g) => g.model))].join(", ")}`),
        el("span", { class: "k" }, "free / busy"), el("span", { dataset: { free: free.size } },
          silent ? "unknown (no recent heartbeat)" : `${free.size} free · ${node.busy_gpu_count} busy`),
        el("span", { class: "k" }, "your attempts"), el("span", { class: "mine", dataset: { count: mine.length } },
          mine.length ? mine.map((a) => el("div", {}, el("a", { href: `/console/jobs/${a.job_id}`, class: "mono" }, `${a.job_id}/${a.attempt}`), " ", pill(a.status)))
            : el("span", { class: "faint" }, "none")),
        el("span", { class: "k" }, "last heartbeat"), el("span", {}, when(node.last_heartbeat_at || node.registered_at)),
        el("span", { class: "k" }, "inventory"), el("span", { title: node.inventory_note }, node.inventory_source),
        el("span", { class: "k" }, "agent"), el("span", { class: "mono" }, node.agent_version || "")));
  }

  async function fleet() {
    shell("fleet");
    const main = document.querySelector("main");
    await guarded(main, async () => {
      const grid = el("div", { class: "nodes", id: "nodes" });
      const summary = announcer("fleetsummary", "sub");
      main.replaceChildren(el("h1", {}, "Fleet"), summary, grid);
      async function refresh() {
        const { nodes } = await getJSON("/v1/nodes");
        const ready = nodes.filter((n) => n.status === "ready");
        const gpus = ready.reduce((a, n) => a + n.gpus.length, 0);
        const free = ready.reduce((a, n) => a + n.free_gpu_indices.length, 0);
        const text = `${nodes.length} node(s), ${ready.length} ready · ${free} of ${gpus} GPUs on ready nodes free. ` +
          "Capacity is shared; only your own attempts are listed.";
        summary.say(text);
        grid.replaceChildren(...(nodes.length ? nodes.map(nodeCard) : [el("div", { class: "empty" }, "No node has registered yet.")]));
      }
      await refresh();
      poll(refresh, 3000);
    });
  }

  return { jobs, job, fleet, pill };
})();

// Each page names itself (<body data-page>): no inline script, so the CSP allows none.
addEventListener("DOMContentLoaded", () => {
  const page = document.body.dataset.page;
  if (page && GL[page]) GL[page]();
});
