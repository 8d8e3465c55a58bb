// The /ui page: a client of the public API and nothing more (docs/api.md). Plain JavaScript, no build.
// Text from a document is only ever set as textContent or an SVG text node, never parsed as HTML.
"use strict";

// What the page is doing, for people reading the console and for the browser tests.
const ocrUi = { ready: false, state: "idle", route: null, jobId: null, events: 0, lastError: null,
                result: null, page: 0, line: -1, cspViolations: 0, downloads: [] };
window.ocrUi = ocrUi;
document.addEventListener("securitypolicyviolation", () => { ocrUi.cspViolations += 1; });

const KEY_STORE = "ocr-ui-api-key";  // session storage of this tab only: never a URL or a cookie
const LOW_CONFIDENCE = 0.8;  // the ppocr engine reads a line again below this; marked for people too
const DIRECT_MAX_BYTES = 2 * 1024 * 1024;  // "by size": larger files, or PDFs of many pages, go as jobs
const DIRECT_MAX_PDF_PAGES = 5;
const SVG = "http://www.w3.org/2000/svg";

const $ = (id) => document.getElementById(id);
// The API beside the page: /ui/ -> /v1/..., and under a route prefix /tenants/ui/ -> /tenants/v1/...
const apiUrl = (path) => new URL("../" + path, window.location.href).toString();

// ---- keys ----

function apiKey() { return window.sessionStorage.getItem(KEY_STORE) || ""; }

function authHeaders() {
  const key = apiKey();
  return key ? { Authorization: "Bearer " + key } : {};
}

function showKeyState() {
  $("key-state").textContent = apiKey() ? "key set for this tab" : "no key";
}

function setupKeys() {
  $("key-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const key = $("api-key").value.trim();
    if (key) window.sessionStorage.setItem(KEY_STORE, key);
    $("api-key").value = "";
    showKeyState();
    hideError();
  });
  $("key-forget").addEventListener("click", () => {
    window.sessionStorage.removeItem(KEY_STORE);
    showKeyState();
  });
  showKeyState();
}

// ---- errors: the API's message and code, Retry-After where given ----

class ApiError extends Error {
  constructor(status, code, message, requestId, retryAfter) {
    super(message);
    Object.assign(this, { status, code, requestId, retryAfter });
  }
}

async function apiError(response) {
  const text = await response.text();
  let error = null;
  try { error = JSON.parse(text).error; } catch (_) { error = null; }
  const retryAfter = response.headers.get("Retry-After");
  if (error && typeof error === "object") {
    return new ApiError(response.status, error.code, String(error.message), error.request_id, retryAfter);
  }
  // Not ours (a proxy in front, say): its first words, as text.
  return new ApiError(response.status, "http_" + response.status, text.slice(0, 300) || response.statusText,
                      response.headers.get("X-Request-ID"), retryAfter);
}

function showError(error) {
  const box = $("error-box");
  const status = error.status ? `${error.status} ` : "";
  $("error-title").textContent = `${status}${error.code || "error"}`;
  $("error-message").textContent = error.message || String(error);
  const detail = [];
  if (error.retryAfter) detail.push(`Retry after ${error.retryAfter} s.`);
  if (error.requestId) detail.push(`Request ${error.requestId}.`);
  $("error-detail").textContent = detail.join(" ");
  box.hidden = false;
  ocrUi.lastError = { status: error.status || 0, code: error.code || "error", message: error.message || String(error),
                      retryAfter: error.retryAfter || null };
  if (error.status === 401) $("api-key").focus();
}

function hideError() { $("error-box").hidden = true; }

async function call(path, options = {}) {
  const response = await fetch(apiUrl(path), { ...options, headers: { ...authHeaders(), ...(options.headers || {}) } });
  if (!response.ok) throw await apiError(response);
  return response;
}

// ---- views ----

function show(view) {
  for (const id of ["upload-view", "progress-view", "result-view"]) $(id).hidden = id !== view;
  ocrUi.state = view.replace("-view", "");
}

// ---- upload ----

let current = null;  // {file, options, route, jobId}

function chosenOptions() {
  const options = {};
  for (const [id, name] of [["opt-pages", "pages"], ["opt-orientation", "orientation"], ["opt-lang", "lang"],
                            ["opt-structure", "structure"], ["opt-pdf-text", "pdf_text"]]) {
    const value = $(id).value.trim();
    if (value) options[name] = value;
  }
  return options;
}

async function pdfPageCount(file) {
  // A cheap look, not a parse: PDFs that hide their pages in object streams count as unknown (null).
  const head = new TextDecoder("latin1").decode(await file.slice(0, DIRECT_MAX_BYTES).arrayBuffer());
  const count = (head.match(/\/Type\s*\/Page(?![s\w])/g) || []).length;
  return count || null;
}

async function routeFor(file) {
  const asked = $("opt-route").value;
  if (asked === "direct" || asked === "job") return { route: asked, why: "as chosen" };
  if (file.size > DIRECT_MAX_BYTES) return { route: "job", why: "a large file" };
  const isPdf = file.type === "application/pdf" || /\.pdf$/i.test(file.name);
  if (isPdf) {
    const pages = await pdfPageCount(file);
    if (pages === null || pages > DIRECT_MAX_PDF_PAGES) return { route: "job", why: pages ? `${pages} pages` : "a PDF" };
    return { route: "direct", why: `${pages} page${pages === 1 ? "" : "s"}` };
  }
  return { route: "direct", why: "a small file" };
}

async function describeRoute() {
  const file = $("file").files[0];
  if (!file) { $("route-note").textContent = "Choose a file."; return; }
  const { route, why } = await routeFor(file);
  ocrUi.route = route;
  $("route-note").textContent = route === "job"
    ? `${file.name}: ${why}, sent as a job to /v1/jobs; its pages are shown as they are read.`
    : `${file.name}: ${why}, sent to /v1/ocr and read at once.`;
}

function formData(file, options) {
  const form = new FormData();
  form.append("file", file, file.name);
  for (const [name, value] of Object.entries(options)) form.append(name, value);
  return form;
}

async function submit(event) {
  event.preventDefault();
  hideError();
  const file = $("file").files[0];
  if (!file) { showError({ code: "missing_file", message: "Choose an image or a PDF first." }); return; }
  const { route } = await routeFor(file);
  current = { file, options: chosenOptions(), route, jobId: null, format: $("opt-format").value };
  ocrUi.route = route;
  $("submit").disabled = true;
  try {
    if (route === "job") await runJob();
    else await readDirect();
  } catch (error) {
    if (error.name !== "AbortError") { show("upload-view"); showError(error); }
  } finally {
    $("submit").disabled = false;
  }
}

async function readDirect() {
  $("route-note").textContent = `Reading ${current.file.name} ...`;
  const response = await call("v1/ocr?page_images=true", { method: "POST",
                                                            body: formData(current.file, current.options) });
  await showResult(await response.json());
}

// ---- a job: submit, its event stream page by page, cancel ----

let streamAbort = null;

async function runJob() {
  const response = await call("v1/jobs?keep_document=true", { method: "POST",
                                                              body: formData(current.file, current.options) });
  const job = await response.json();
  current.jobId = ocrUi.jobId = job.id;
  $("job-id").textContent = job.id;
  $("job-events").replaceChildren();
  progress({ done: 0, failed: 0, total: job.pages ? job.pages.total : 0 }, job.status);
  show("progress-view");
  $("cancel").focus();
  const end = await followEvents(job.id);
  if (end.status === "deleted" || end.status === "canceled") {
    show("upload-view");
    showError({ code: end.status, message: `The job ${job.id} was ${end.status}.` });
    return;
  }
  if (end.status === "failed") {
    show("upload-view");
    const why = end.error && (end.error.message || end.error.code || String(end.error));
    showError({ code: "job_failed", message: `The job failed${why ? ": " + why : "."}` });
    return;
  }
  const result = await call(`v1/jobs/${encodeURIComponent(job.id)}/result`);
  await showResult(await result.json());
}

function progress(counts, status) {
  const finished = counts.done + counts.failed;
  $("job-progress").max = Math.max(counts.total, 1);
  $("job-progress").value = finished;
  $("job-counts").textContent = `${status}: ${finished} of ${counts.total} pages read` +
    (counts.failed ? ` (${counts.failed} failed)` : "");
}

function parseEvent(block) {
  const event = { id: null, name: "message", data: "" };
  for (const line of block.split("\n")) {
    if (!line || line.startsWith(":")) continue;  // a keep-alive comment
    const colon = line.indexOf(":");
    const field = colon < 0 ? line : line.slice(0, colon);
    const value = colon < 0 ? "" : line.slice(colon + 1).replace(/^ /, "");
    if (field === "id") event.id = value;
    else if (field === "event") event.name = value;
    else if (field === "data") event.data += (event.data ? "\n" : "") + value;
  }
  return event.data ? event : null;
}

async function followEvents(jobId) {
  // EventSource cannot send a key, so the stream is read with fetch; a dropped stream is
  // picked up where it stopped (Last-Event-ID), nothing twice, nothing missed.
  let lastId = null;
  for (let attempt = 0; attempt < 6; attempt += 1) {
    streamAbort = new AbortController();
    const headers = lastId ? { "Last-Event-ID": lastId } : {};
    const response = await call(`v1/jobs/${encodeURIComponent(jobId)}/events`,
                                { headers, signal: streamAbort.signal });
    const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
    let buffer = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buffer = (buffer + value).replace(/\r\n/g, "\n");
      let cut;
      while ((cut = buffer.indexOf("\n\n")) >= 0) {
        const event = parseEvent(buffer.slice(0, cut));
        buffer = buffer.slice(cut + 2);
        if (!event) continue;
        if (event.id) lastId = event.id;
        const data = JSON.parse(event.data);
        if (event.name === "end") { streamAbort = null; return data; }
        onPageEvent(data);
      }
    }
    await new Promise((resolve) => setTimeout(resolve, 1000));
  }
  throw new ApiError(0, "stream_lost", "The job's event stream kept closing; the job goes on: look it up later.",
                     jobId, null);
}

function onPageEvent(data) {
  ocrUi.events += 1;
  progress(data, "running");
  const item = document.createElement("li");
  item.textContent = `page ${data.page_number}: ${data.status}`;
  $("job-events").append(item);
}

async function cancelJob() {
  if (!current || !current.jobId) return;
  const jobId = current.jobId;
  try {
    await call(`v1/jobs/${encodeURIComponent(jobId)}`, { method: "DELETE" });
  } catch (error) {
    showError(error);
    return;
  }
  if (streamAbort) streamAbort.abort();
  show("upload-view");
  showError({ code: "canceled", message: `The job ${jobId} was canceled and its data deleted.` });
}

// ---- the result: the page with its boxes, the lines, the Markdown ----

function showResult(result) {
  ocrUi.result = result;
  const select = $("page-select");
  select.replaceChildren(...result.pages.map((page, index) => {
    const option = document.createElement("option");
    option.value = String(index);
    option.textContent = `${page.page_number} of ${result.pages.length}`;
    return option;
  }));
  $("download-note").textContent = current.route === "job"
    ? "Every format comes from the job's stored result."
    : "JSON and Markdown come from this result; PDF, hOCR and ALTO read the file again (/v1/ocr keeps nothing).";
  show("result-view");
  showPage(0);
  $("lines").focus();
  if (current.format !== "json") download(current.format);
}

function showPage(index) {
  const pages = ocrUi.result.pages;
  ocrUi.page = Math.max(0, Math.min(index, pages.length - 1));
  ocrUi.line = -1;
  const page = pages[ocrUi.page];
  $("page-select").value = String(ocrUi.page);
  $("page-prev").disabled = ocrUi.page === 0;
  $("page-next").disabled = ocrUi.page === pages.length - 1;
  $("page-facts").textContent = pageFacts(page);
  $("page-notes").replaceChildren(...(page.notes || []).map((note) => {
    const item = document.createElement("li");
    item.textContent = note;
    return item;
  }));
  drawPage(page);
  listLines(page);
  renderMarkdown(page);
  $("markdown-source").textContent = page.markdown || "";
  $("selected-line").textContent = "Select a line (arrow keys move).";
}

function pageFacts(page) {
  if (page.error) return `this page failed: ${page.error.message} (${page.error.code})`;  // a partial job's
  const turn = page.rotation ? `turned ${page.rotation}° clockwise to read` : "read as uploaded";
  const confidence = page.rotation_confidence == null ? "" : ` (confidence ${page.rotation_confidence.toFixed(2)})`;
  const source = page.text_source === "pdf_text" ? "; text from the PDF's own layer" : "";
  return `${page.width} × ${page.height} px; ${turn}${confidence}${source}; ${(page.blocks || []).length} lines`;
}

function svgElement(name, attributes, title) {
  const element = document.createElementNS(SVG, name);
  for (const [key, value] of Object.entries(attributes)) element.setAttribute(key, String(value));
  if (title) {
    const tip = document.createElementNS(SVG, "title");
    tip.textContent = title;  // shown on hover; text, never markup
    element.append(tip);
  }
  return element;
}

function boxAttributes(bbox, className) {
  const [x0, y0, x1, y1] = bbox;
  return { x: x0, y: y0, width: Math.max(x1 - x0, 1), height: Math.max(y1 - y0, 1), class: className };
}

function lineIsLow(block) {
  return block.confidence < LOW_CONFIDENCE || (block.words || []).some((word) => word.confidence < LOW_CONFIDENCE);
}

function drawPage(page) {
  const svg = $("page-svg");
  const width = page.width || 1000, height = page.height || 1400;
  svg.setAttribute("viewBox", `0 0 ${width} ${height}`);
  const parts = [svgElement("rect", { x: 0, y: 0, width, height, class: "page-blank" })];
  if (page.image && page.image.data_url) {
    // The service's picture of the page as uploaded (page_images=true): the boxes' coordinates.
    parts.push(svgElement("image", { href: page.image.data_url, x: 0, y: 0, width, height,
                                     preserveAspectRatio: "none" }));
    $("page-caption").textContent = "The page as uploaded, with what was read drawn over it.";
  } else if (current.file && /^image\/(png|jpeg|gif|webp|bmp)$/.test(current.file.type)) {
    parts.push(svgElement("image", { href: localPicture(), x: 0, y: 0, width, height, preserveAspectRatio: "none" }));
    $("page-caption").textContent = "Your file, with what was read drawn over it.";
  } else {
    $("page-caption").textContent = "A job keeps no page pictures: the boxes are drawn on a blank page of the page's size.";
  }
  for (const region of page.regions || []) {
    if (region.bbox) parts.push(svgElement("rect", boxAttributes(region.bbox, `region ${region.type}`), region.type));
  }
  for (const table of page.tables || []) {
    for (const cell of table.cells || []) {
      if (cell.bbox) parts.push(svgElement("rect", boxAttributes(cell.bbox, "cell"), cell.text));
    }
  }
  (page.blocks || []).forEach((block, index) => {
    if (!block.bbox) return;
    const low = lineIsLow(block) ? " low" : "";
    const rect = svgElement("rect", { ...boxAttributes(block.bbox, "line" + low), "data-line": index },
                            `${block.text} (${(block.confidence * 100).toFixed(0)}%)`);
    rect.addEventListener("click", () => pickLine(index, true));
    parts.push(rect);
    for (const word of block.words || []) {
      const cls = "word" + (word.confidence < LOW_CONFIDENCE ? " low" : "");
      parts.push(svgElement("rect", boxAttributes(word.bbox, cls),
                            `${word.text} (${(word.confidence * 100).toFixed(0)}%)`));
    }
  });
  svg.replaceChildren(...parts);
  layers();
}

let pictureUrl = null;
function localPicture() {
  // The browser turns a picture by its EXIF orientation, as the service does: the same coordinates.
  if (!pictureUrl || pictureUrl.file !== current.file) {
    if (pictureUrl) URL.revokeObjectURL(pictureUrl.url);
    pictureUrl = { file: current.file, url: URL.createObjectURL(current.file) };
  }
  return pictureUrl.url;
}

function layers() {
  const svg = $("page-svg");
  svg.classList.toggle("hide-regions", !$("show-regions").checked);
  svg.classList.toggle("hide-lines", !$("show-lines").checked);
  svg.classList.toggle("hide-words", !$("show-words").checked);
}

function listLines(page) {
  const items = (page.blocks || []).map((block, index) => {
    const item = document.createElement("li");
    item.id = `line-${index}`;
    item.setAttribute("role", "option");
    item.setAttribute("aria-selected", "false");
    item.dataset.line = String(index);
    if (lineIsLow(block)) item.classList.add("low");
    const confidence = document.createElement("span");
    confidence.className = "conf";
    confidence.textContent = block.confidence == null ? "" : `${(block.confidence * 100).toFixed(0)}%`;
    item.append(confidence, document.createTextNode(block.text));
    item.addEventListener("click", () => pickLine(index, false));
    return item;
  });
  $("lines").replaceChildren(...items);
  $("lines").removeAttribute("aria-activedescendant");
}

function pickLine(index, fromPage) {
  const blocks = ocrUi.result.pages[ocrUi.page].blocks || [];
  if (!blocks.length) return;
  index = Math.max(0, Math.min(index, blocks.length - 1));
  ocrUi.line = index;
  for (const item of $("lines").children) item.setAttribute("aria-selected", String(item.dataset.line === String(index)));
  for (const rect of $("page-svg").querySelectorAll("rect.line")) {
    rect.classList.toggle("picked", rect.dataset.line === String(index));
  }
  const item = $(`line-${index}`);
  $("lines").setAttribute("aria-activedescendant", item.id);
  item.scrollIntoView({ block: "nearest" });
  const block = blocks[index];
  const words = (block.words || []).filter((word) => word.confidence < LOW_CONFIDENCE).map((word) => word.text);
  $("selected-line").textContent = `Line ${index + 1} of ${blocks.length} (${block.type || "text"}, ` +
    `confidence ${block.confidence == null ? "-" : block.confidence.toFixed(2)}): ${block.text}` +
    (words.length ? `\nlow-confidence words: ${words.join(" ")}` : "");
  if (fromPage) { showTab("lines"); $("lines").focus(); }
}

function onLinesKey(event) {
  const blocks = ocrUi.result ? ocrUi.result.pages[ocrUi.page].blocks || [] : [];
  const moves = { ArrowDown: ocrUi.line + 1, ArrowUp: Math.max(ocrUi.line - 1, 0), Home: 0, End: blocks.length - 1,
                  PageDown: ocrUi.line + 10, PageUp: Math.max(ocrUi.line - 10, 0) };
  if (!(event.key in moves) || !blocks.length) return;
  event.preventDefault();
  pickLine(moves[event.key], false);
}

// The Markdown, rendered from the structure (regions, tables' cells), never by parsing text as HTML.
function renderMarkdown(page) {
  const out = [];
  const regions = page.regions && page.regions.length ? page.regions
    : [{ type: "text", text: (page.blocks || []).map((block) => block.text).join("\n") || page.text || "" }];
  for (const region of regions) {
    if (region.type === "table" && region.table != null && page.tables && page.tables[region.table]) {
      out.push(tableElement(page.tables[region.table]));
    } else if (region.type === "title") {
      out.push(textElement("h3", region.text));
    } else if (region.type === "figure" || region.type === "equation") {
      out.push(textElement("p", `[${region.type}] ${region.text || ""}`, "figure"));
    } else if (region.type === "header" || region.type === "footer") {
      continue;  // the Markdown leaves them out of the body, as the service's does
    } else if (region.text) {
      out.push(textElement("p", region.text, region.type));
    }
  }
  $("markdown-panel").replaceChildren(...out);
}

function textElement(tag, text, className) {
  const element = document.createElement(tag);
  element.textContent = text;
  if (className) element.className = className;
  return element;
}

function tableElement(table) {
  const element = document.createElement("table");
  const rows = Array.from({ length: table.rows || 0 }, () => document.createElement("tr"));
  const cells = [...(table.cells || [])].sort((a, b) => a.row - b.row || a.column - b.column);
  for (const cell of cells) {
    const td = textElement(cell.row === 0 ? "th" : "td", cell.text || "");
    if (cell.row_span > 1) td.rowSpan = cell.row_span;
    if (cell.column_span > 1) td.colSpan = cell.column_span;
    if (rows[cell.row]) rows[cell.row].append(td);
  }
  element.append(...rows);
  return element;
}

function showTab(name) {
  for (const tab of ["lines", "markdown", "source"]) {
    $(`tab-${tab}`).setAttribute("aria-selected", String(tab === name));
    $(`${tab}-panel`).hidden = tab !== name;
  }
}

// ---- downloads ----

const SUFFIX = { json: ".json", markdown: ".md", pdf: ".pdf", hocr: ".hocr", alto: ".alto.xml" };

async function download(format) {
  $("download-note").textContent = `Preparing ${format} ...`;
  try {
    const blob = await downloadBlob(format);
    const link = document.createElement("a");
    link.href = URL.createObjectURL(blob);
    link.download = current.file.name.replace(/\.[^.]*$/, "") + SUFFIX[format];
    document.body.append(link);
    link.click();
    link.remove();
    setTimeout(() => URL.revokeObjectURL(link.href), 60000);
    ocrUi.downloads.push({ format, name: link.download, bytes: blob.size });
    $("download-note").textContent = `${link.download}: ${blob.size} bytes.`;
  } catch (error) {
    $("download-note").textContent = "";
    showError(error);
  }
}

async function downloadBlob(format) {
  const result = ocrUi.result;
  if (current.route === "job") {
    const response = await call(`v1/jobs/${encodeURIComponent(current.jobId)}/result?format=${format}`);
    return response.blob();
  }
  if (format === "json") {
    const pages = result.pages.map(({ image, ...page }) => page);  // the pictures were for this page only
    return new Blob([JSON.stringify({ ...result, pages }, null, 2)], { type: "application/json" });
  }
  if (format === "markdown") {  // as the service writes it: each page's Markdown, a blank line between
    return new Blob([result.pages.map((page) => page.markdown).join("\n\n")], { type: "text/markdown" });
  }
  const response = await call(`v1/ocr?format=${format}`, { method: "POST",
                                                           body: formData(current.file, current.options) });
  return response.blob();
}

// ---- wiring ----

function setupDrop() {
  const zone = $("drop-zone");
  zone.addEventListener("dragover", (event) => { event.preventDefault(); zone.classList.add("over"); });
  zone.addEventListener("dragleave", () => zone.classList.remove("over"));
  zone.addEventListener("drop", (event) => {
    event.preventDefault();
    zone.classList.remove("over");
    if (event.dataTransfer.files.length) {
      $("file").files = event.dataTransfer.files;
      describeRoute();
    }
  });
}

function setup() {
  setupKeys();
  setupDrop();
  $("file").addEventListener("change", describeRoute);
  $("opt-route").addEventListener("change", describeRoute);
  $("upload-form").addEventListener("submit", submit);
  $("cancel").addEventListener("click", cancelJob);
  $("page-select").addEventListener("change", () => showPage(Number($("page-select").value)));
  $("page-prev").addEventListener("click", () => showPage(ocrUi.page - 1));
  $("page-next").addEventListener("click", () => showPage(ocrUi.page + 1));
  for (const id of ["show-regions", "show-lines", "show-words"]) $(id).addEventListener("change", layers);
  for (const tab of ["lines", "markdown", "source"]) $(`tab-${tab}`).addEventListener("click", () => showTab(tab));
  $("lines").addEventListener("keydown", onLinesKey);
  $("lines").addEventListener("focus", () => { if (ocrUi.line < 0) pickLine(0, false); });
  for (const button of $("downloads").querySelectorAll("button[data-format]")) {
    button.addEventListener("click", () => download(button.dataset.format));
  }
  $("again").addEventListener("click", () => { hideError(); show("upload-view"); $("file").focus(); });
  show("upload-view");
  ocrUi.ready = true;
}

setup();
