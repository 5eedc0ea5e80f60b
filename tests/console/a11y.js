// What the console's browser tests measure on a rendered page (run by tests/console/a11y.py).
// contrast(): every element that shows text, against its effective background (the
// backgrounds of it and its ancestors composited, each stop of a gradient taken apart), and
// every form control's edge against what surrounds it; WCAG 2.x AA: 4.5:1 for normal text,
// 3:1 for large text (24 px, or 18.66 px bold) and for a control's edge.
"use strict";

const canvas = document.createElement("canvas");
canvas.width = canvas.height = 1;
const ctx = canvas.getContext("2d", { willReadFrequently: true });

// Any CSS colour the browser knows (rgb(), color(srgb ...), color-mix() results) as RGBA.
function rgba(css) {
  ctx.clearRect(0, 0, 1, 1);
  ctx.fillStyle = "rgba(0, 0, 0, 0)";
  ctx.fillStyle = css;
  ctx.fillRect(0, 0, 1, 1);
  const [r, g, b, a] = ctx.getImageData(0, 0, 1, 1).data;
  return [r, g, b, a / 255];
}

const over = (top, bottom) => {
  const a = top[3];
  return [0, 1, 2].map((i) => top[i] * a + bottom[i] * (1 - a)).concat([1]);
};

function luminance([r, g, b]) {
  const lin = (c) => { c /= 255; return c <= 0.04045 ? c / 12.92 : ((c + 0.055) / 1.055) ** 2.4; };
  return 0.2126 * lin(r) + 0.7152 * lin(g) + 0.0722 * lin(b);
}

function ratio(x, y) {
  const [hi, lo] = [luminance(x), luminance(y)].sort((p, q) => q - p);
  return (hi + 0.05) / (lo + 0.05);
}

const STOP = /(rgba?\([^)]*\)|color\([^)]*\))/g;

// Every colour the element's box may show behind its content: the page canvas (white),
// then each ancestor's background colour and gradient stops, from the root down.
function backgrounds(element) {
  const chain = [];
  for (let node = element; node && node.nodeType === 1; node = node.parentElement) chain.unshift(node);
  let layers = [[255, 255, 255, 1]];
  let opacity = 1;
  for (const node of chain) {
    const style = getComputedStyle(node);
    opacity *= Number(style.opacity);
    const fill = rgba(style.backgroundColor);
    fill[3] *= opacity;
    layers = layers.map((under) => over(fill, under));
    const stops = (style.backgroundImage.match(STOP) || []).map(rgba).map(([r, g, b, a]) => [r, g, b, a * opacity]);
    if (stops.length) layers = layers.flatMap((under) => stops.map((s) => over(s, under)));
    layers = [...new Map(layers.map((l) => [l.map(Math.round).join(","), l])).values()];
  }
  return { layers, opacity };
}

function describe(element) {
  const parts = [];
  for (let node = element; node && node !== document.body && parts.length < 4; node = node.parentElement) {
    parts.unshift(node.tagName.toLowerCase() + (node.id ? `#${node.id}` : "") +
      (node.classList.length ? `.${[...node.classList].join(".")}` : ""));
  }
  return parts.join(" > ");
}

const shown = (element) => element.getClientRects().length > 0 &&
  getComputedStyle(element).visibility === "visible";

function checkText(element, colour, text, failures) {
  const style = getComputedStyle(element);
  const size = parseFloat(style.fontSize);
  const large = size >= 24 || (size >= 18.66 && Number(style.fontWeight) >= 700);
  const need = large ? 3 : 4.5;
  const { layers, opacity } = backgrounds(element);
  const fg = rgba(colour);
  fg[3] *= opacity;
  for (const bg of layers) {
    const seen = ratio(over(fg, bg), bg);
    if (seen < need) {
      failures.push({ where: describe(element), text: text.slice(0, 60), ratio: Number(seen.toFixed(2)),
                      need, fg: colour, bg: `rgb(${bg.slice(0, 3).map(Math.round).join(", ")})` });
      return;
    }
  }
}

function checkEdge(control, failures) {
  const style = getComputedStyle(control);
  const outer = backgrounds(control.parentElement).layers;
  const own = backgrounds(control).layers;
  const width = ["Top", "Right", "Bottom", "Left"].map((s) => parseFloat(style[`border${s}Width`]));
  const edge = rgba(style.borderTopColor);
  const bordered = Math.min(...width) > 0 && edge[3] > 0;
  const filled = own.some((o) => outer.some((u) => ratio(o, u) > 1.01));
  if (!bordered && !filled) return; // its text alone marks it (a link-like button)
  for (const under of outer) {
    const seen = Math.max(bordered ? ratio(over(edge, under), under) : 1,
                          ...own.map((o) => ratio(o, under)));
    if (seen < 3) {
      failures.push({ where: describe(control), text: (control.textContent || control.placeholder || "").slice(0, 60),
                      ratio: Number(seen.toFixed(2)), need: 3, fg: style.borderTopColor, bg: `rgb(${under.slice(0, 3).map(Math.round).join(", ")})` });
      return;
    }
  }
}

function contrast() {
  const failures = [];
  let texts = 0;
  let controls = 0;
  for (const element of document.body.querySelectorAll("*")) {
    if (!shown(element)) continue;
    const own = [...element.childNodes].filter((n) => n.nodeType === 3 && n.textContent.trim());
    if (own.length) {
      texts += 1;
      checkText(element, getComputedStyle(element).color, own.map((n) => n.textContent).join(" ").trim(), failures);
    }
    if (element.matches("input, select, textarea")) {
      texts += 1;
      checkText(element, getComputedStyle(element).color, element.value || "(its value)", failures);
      if (element.placeholder) {
        checkText(element, getComputedStyle(element, "::placeholder").color, element.placeholder, failures);
      }
    }
    if (element.matches("button, input, select, textarea")) {
      controls += 1;
      checkEdge(element, failures);
    }
  }
  return { failures, texts, controls };
}

// Every state the stylesheet colours (its --s-* properties, in any rule), as the console's
// own status pills, so that states no job on the page is in are measured too.
function statusSwatches() {
  const states = new Set();
  const walk = (rules) => {
    for (const rule of rules) {
      if (rule.cssRules) walk(rule.cssRules);
      if (!rule.style) continue;
      for (const name of rule.style) if (name.startsWith("--s-")) states.add(name.slice(4));
    }
  };
  for (const sheet of document.styleSheets) walk(sheet.cssRules);
  const box = document.createElement("div");
  box.id = "swatches";
  box.className = "panel";
  for (const state of states) box.append(GL.pill(state), " ");
  document.querySelector("main").append(box);
  return [...states];
}
