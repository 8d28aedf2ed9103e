// lockbroker operator page: the held locks and semaphores under a prefix.
//
// Locks: first fill from GET /v1/locks (every page), then the event stream
// GET /v1/events?prefix=... read with fetch() (EventSource cannot send an
// Authorization header) and parsed here. Requests join and leave a lock's
// queue without any event, so while the page is visible the listing is read
// again every 5 s for the waiting counts alone; the stream alone adds and
// drops rows. A lock whose lease expired unreleased stays listed while it
// waits out its lock-delay; an `expired` event does not say how long that
// is, so the page then reads the lock's status.
//
// A status has no time of grant, so the page cannot say how long a lease has
// been held; it shows what the status gives: how long the lease stays valid
// (expires in) and how long until the lock is free (free in:
// available_in_ms, the lease plus its lock-delay).
//
// Semaphores: the prefix stream carries no semaphore, and one stream per
// semaphore (GET /v1/semaphores/{name}/events) would take one of the
// browser's few connections to the broker each, so GET /v1/semaphores is
// read again every 5 s while the page is visible.
//
// Every string from the broker goes into the page through textContent,
// never as markup.
"use strict";

(function () {
  const KEY_STORAGE = "lockbroker.key";
  const HISTORY_LIMIT = 200;
  const LIST_PAGE_LIMIT = 500;
  const LIST_MAX_PAGES = 1000;
  const BACKOFF_FIRST_MS = 1000;
  const BACKOFF_MAX_MS = 30000;
  // The broker sends a keep-alive comment every 15 s; silence for much
  // longer than that means the connection is gone without telling us.
  const STALE_AFTER_MS = 45000;
  // How often the waiting counts are read again while the page is visible.
  const WAITING_REFRESH_MS = 5000;
  // How often the semaphore listing is read again while the page is visible.
  const SEMAPHORE_REFRESH_MS = 5000;

  const $ = (id) => document.getElementById(id);
  const el = {
    connection: $("connection"),
    forgetKey: $("forget-key"),
    status: $("status"),
    keyPanel: $("key-panel"),
    keyForm: $("key-form"),
    keyInput: $("api-key"),
    prefixForm: $("prefix-form"),
    prefix: $("prefix"),
    locks: $("locks"),
    empty: $("empty"),
    semaphores: $("semaphores"),
    semaphoresEmpty: $("semaphores-empty"),
    semaphoresFailed: $("semaphores-failed"),
    history: $("history"),
    historyHeading: $("history-heading"),
    historyList: $("history-list"),
    historyEmpty: $("history-empty"),
    historyClose: $("history-close"),
    confirm: $("confirm"),
    confirmName: $("confirm-name"),
    confirmWhat: $("confirm-what"),
    confirmYes: $("confirm-yes"),
    confirmNo: $("confirm-no"),
  };

  // ---- state -------------------------------------------------------------

  /**
   * name -> {name, holders: Map<fence, holder>, hidden, delayUntil, waiting,
   * waitingAt, changedAt, row}: `delayUntil` is the performance.now() until
   * which an expired lease's lock-delay keeps the lock (0: none known);
   * `waiting` is the queue length last seen (null: unknown), `waitingAt` the
   * performance.now() when it was read (for a refresh: when it was asked
   * for); `changedAt` when the row last changed.
   */
  const locks = new Map();
  /** name -> {name, status, seenAt, row}: the last listing's SemaphoreStatus. */
  const semaphores = new Map();
  /** name -> [{at: Date, type, fence, owner}], newest last */
  const histories = new Map();
  let selected = null;
  /** The force release awaiting confirmation: {kind: "lock" | "semaphore", name}. */
  let pendingRelease = null;
  let releaseOpener = null;

  // One "generation" per prefix or key: a change starts a new one, and the
  // work of an older one (a listing page, a stream) stops touching the page.
  let generation = 0;
  let prefix = "";
  let abort = null;
  let lastEventId = null;
  let lastActivity = 0;
  let streamLive = false;
  // Names seen in the current run of `state` events, until its marker.
  let snapshot = null;
  // The waiting-count refresh in flight (one at a time) and when it began.
  let refreshAbort = null;
  let lastRefresh = 0;
  // The semaphore listing read in flight (one at a time) and when it began.
  let semaphoreAbort = null;
  let lastSemaphoreRead = 0;

  // ---- API key -----------------------------------------------------------

  function storedKey() {
    try {
      return window.sessionStorage.getItem(KEY_STORAGE) || "";
    } catch (_) {
      return "";
    }
  }

  function storeKey(key) {
    try {
      if (key) {
        window.sessionStorage.setItem(KEY_STORAGE, key);
      } else {
        window.sessionStorage.removeItem(KEY_STORAGE);
      }
    } catch (_) {
      // Storage refused: the key lives no longer than this call.
    }
    el.forgetKey.hidden = !storedKey();
  }

  function headers(extra) {
    const h = new Headers(extra || {});
    const key = storedKey();
    if (key) {
      h.set("Authorization", "Bearer " + key);
    }
    return h;
  }

  function askForKey() {
    const wasHidden = el.keyPanel.hidden;
    el.keyPanel.hidden = false;
    setStatus(
      storedKey()
        ? "The broker refused this API key. Enter another one."
        : "The broker asks for an API key.",
      "error",
    );
    if (wasHidden) {
      el.keyInput.focus();
    }
  }

  // ---- small helpers -----------------------------------------------------

  function setStatus(text, kind) {
    el.status.textContent = text;
    if (kind) {
      el.status.dataset.kind = kind;
    } else {
      delete el.status.dataset.kind;
    }
  }

  function setConnection(state, text) {
    el.connection.dataset.state = state;
    el.connection.textContent = text;
  }

  function sleep(ms) {
    return new Promise((resolve) => window.setTimeout(resolve, ms));
  }

  function apiUrl(path, query) {
    const url = new URL(path, window.location.origin);
    if (query) {
      for (const [k, v] of Object.entries(query)) {
        if (v !== null && v !== undefined) {
          url.searchParams.set(k, v);
        }
      }
    }
    return url.toString();
  }

  function lockPath(name) {
    return "/v1/locks/" + encodeURIComponent(name);
  }

  function semaphorePath(name) {
    return "/v1/semaphores/" + encodeURIComponent(name);
  }

  /**
   * One call to the broker's API: the stored key as a bearer token, a JSON
   * answer asked for, and a body (when given) sent as JSON under
   * `Content-Type: application/json`, the only body type the API takes.
   * options: {method, query, body, signal, headers}.
   */
  function api(path, options) {
    const o = options || {};
    const h = headers(Object.assign({ Accept: "application/json" }, o.headers || {}));
    const init = { method: o.method || "GET", headers: h, signal: o.signal, cache: "no-store" };
    if (o.body !== undefined) {
      h.set("Content-Type", "application/json");
      init.body = JSON.stringify(o.body);
    }
    return fetch(apiUrl(path, o.query), init);
  }

  /** The message of a JSON error body, or a generic one. */
  async function errorMessage(response) {
    try {
      const body = await response.json();
      if (body && body.error && typeof body.error.message === "string") {
        return body.error.message;
      }
    } catch (_) {
      // Not JSON.
    }
    return "HTTP " + response.status;
  }

  function formatLeft(ms) {
    if (!(ms > 0)) {
      return "0 s";
    }
    const total = Math.ceil(ms / 1000);
    const h = Math.floor(total / 3600);
    const m = Math.floor((total % 3600) / 60);
    const s = total % 60;
    const pad = (n) => String(n).padStart(2, "0");
    if (h > 0) {
      return h + " h " + pad(m) + " min";
    }
    if (m > 0) {
      return m + " min " + pad(s) + " s";
    }
    return s + " s";
  }

  function formatTime(date) {
    const pad = (n, w) => String(n).padStart(w || 2, "0");
    return (
      pad(date.getHours()) +
      ":" +
      pad(date.getMinutes()) +
      ":" +
      pad(date.getSeconds()) +
      "." +
      pad(date.getMilliseconds(), 3)
    );
  }

  function text(value) {
    return value === null || value === undefined || value === "" ? "—" : String(value);
  }

  function cell(tag, content, className) {
    const node = document.createElement(tag);
    node.textContent = content;
    if (className) {
      node.className = className;
    }
    return node;
  }

  // ---- the locks table ---------------------------------------------------

  /** A lease's lock-delay from a status entry; null from an event (unknown). */
  function delayOf(data) {
    const left = data.expires_in_ms;
    const available = data.available_in_ms;
    return Number.isSafeInteger(left) && Number.isSafeInteger(available) && available >= left
      ? available - left
      : null;
  }

  function holderFrom(data, mode) {
    const left = Number(data.expires_in_ms) || 0;
    return {
      fence: data.fence,
      owner: data.owner === undefined ? null : data.owner,
      mode: mode || data.mode || "exclusive",
      expiresAt: performance.now() + left,
      delayMs: delayOf(data),
    };
  }

  function lockFor(name) {
    let lock = locks.get(name);
    if (!lock) {
      lock = {
        name,
        holders: new Map(),
        hidden: 0,
        delayUntil: 0,
        waiting: null,
        waitingAt: 0,
        changedAt: 0,
        row: null,
      };
      locks.set(name, lock);
    }
    lock.changedAt = performance.now();
    return lock;
  }

  function dropLock(name) {
    const lock = locks.get(name);
    if (!lock) {
      return;
    }
    locks.delete(name);
    if (lock.row) {
      const hadFocus = lock.row.contains(document.activeElement);
      const next = lock.row.nextElementSibling || lock.row.previousElementSibling;
      lock.row.remove();
      if (hadFocus) {
        (next || el.prefix).focus();
      }
    }
    updateEmpty();
  }

  /** Whether a lease still holds the lock, or its lock-delay keeps it. */
  function inPlace(lock) {
    return lock.holders.size + lock.hidden > 0 || lock.delayUntil > performance.now();
  }

  /**
   * Replaces a lock's row with a LockStatus (from a listing, a `state` or a
   * status read): a held lock, or one waiting out a lock-delay.
   */
  function applyStatus(status) {
    if (!status || typeof status.name !== "string") {
      return;
    }
    const available = Number(status.available_in_ms) || 0;
    if (!status.held && available <= 0) {
      dropLock(status.name);
      return;
    }
    const lock = lockFor(status.name);
    lock.holders.clear();
    lock.hidden = 0;
    // Held, the delays are the holders' own; not held, what keeps the lock
    // is the lock-delay of a lease that expired.
    lock.delayUntil = status.held ? 0 : performance.now() + available;
    const shown = Array.isArray(status.holders) ? status.holders : [];
    for (const h of shown) {
      // Leases in their lock-delay are listed too; only valid ones hold.
      if ((Number(h.expires_in_ms) || 0) > 0) {
        lock.holders.set(String(h.fence), holderFrom(h));
      }
    }
    if (status.held && lock.holders.size === 0) {
      // A status without holder details: the lock as one holder.
      lock.holders.set(String(status.fence), holderFrom(status));
    }
    const count = Number(status.holder_count) || 0;
    lock.hidden = status.held ? Math.max(0, count - lock.holders.size) : 0;
    lock.waiting = waitingOf(status);
    lock.waitingAt = performance.now();
    render(lock);
  }

  /** A status's `waiting`: a count, or null (unknown) when absent or odd. */
  function waitingOf(status) {
    const n = status.waiting;
    return Number.isSafeInteger(n) && n >= 0 ? n : null;
  }

  /**
   * The waiting count of a listing entry read by the refresh, asked for at
   * `askedAt`: only for a row already shown, and not over a `state` event
   * that arrived after the question. The lock-delays of leases the page
   * knows from events alone are filled in too.
   */
  function applyWaiting(status, askedAt) {
    if (!status || typeof status.name !== "string") {
      return;
    }
    const lock = locks.get(status.name);
    if (!lock || lock.waitingAt > askedAt) {
      return;
    }
    lock.waiting = waitingOf(status);
    lock.waitingAt = askedAt;
    for (const h of Array.isArray(status.holders) ? status.holders : []) {
      const holder = lock.holders.get(String(h.fence));
      if (holder && holder.delayMs === null) {
        holder.delayMs = delayOf(h);
      }
    }
    if (lock.row) {
      renderWaiting(lock);
      renderLeft(lock);
    }
  }

  /**
   * Reads the status of a lock whose lease expired: how long its lock-delay
   * keeps it, which the event does not say. Not over a change that arrived
   * after the question; on failure the row goes when no lease holds it.
   */
  async function readExpired(gen, name) {
    const askedAt = performance.now();
    let status = null;
    try {
      const response = await api(lockPath(name));
      status = response.ok ? await response.json() : null;
    } catch (_) {
      // The broker did not answer: judged below without the status.
    }
    const lock = locks.get(name);
    if (gen !== generation || !lock || lock.changedAt > askedAt) {
      return;
    }
    if (status && status.name === name) {
      applyStatus(status);
    } else if (!inPlace(lock)) {
      dropLock(name);
    }
  }

  /**
   * One change event: acquired, extended, released, expired, force_released.
   * These carry no waiting count: a row keeps the last one known.
   */
  function applyChange(gen, type, data) {
    if (!data || typeof data.name !== "string" || data.mode === "permit") {
      return;
    }
    const key = String(data.fence);
    if (type === "acquired" || type === "extended") {
      const lock = lockFor(data.name);
      if (type === "acquired" && data.mode === "exclusive") {
        // An exclusive grant excludes every other lease, and any lock-delay.
        lock.holders.clear();
        lock.hidden = 0;
        lock.delayUntil = 0;
      }
      const before = lock.holders.get(key);
      const holder = holderFrom(data);
      if (before) {
        // An extend keeps the lease's lock-delay.
        holder.delayMs = before.delayMs;
      }
      lock.holders.set(key, holder);
      render(lock);
      return;
    }
    const lock = locks.get(data.name);
    if (!lock) {
      return;
    }
    if (type === "force_released") {
      // A force release ends every lease of the lock, and any lock-delay.
      dropLock(data.name);
      return;
    }
    lock.changedAt = performance.now();
    const holder = lock.holders.get(key);
    if (!lock.holders.delete(key) && lock.hidden > 0) {
      lock.hidden -= 1;
    }
    let ask = false;
    if (type === "expired") {
      if (holder && holder.delayMs !== null) {
        lock.delayUntil = Math.max(lock.delayUntil, performance.now() + holder.delayMs);
      } else {
        // The delay is unknown: the row stays until the status says.
        ask = true;
      }
    }
    if (ask) {
      render(lock);
      readExpired(gen, data.name);
    } else if (inPlace(lock)) {
      render(lock);
    } else {
      dropLock(data.name);
    }
  }

  function summary(lock) {
    const holders = Array.from(lock.holders.values());
    const exclusive = holders.find((h) => h.mode === "exclusive");
    let owner;
    if (exclusive) {
      owner = text(exclusive.owner);
    } else {
      const owners = Array.from(new Set(holders.map((h) => h.owner).filter((o) => o)));
      owner = owners.length === 0 ? "—" : owners.slice(0, 2).join(", ");
      if (owners.length > 2) {
        owner += " +" + (owners.length - 2);
      }
    }
    let fence = null;
    let expiresAt = 0;
    for (const h of holders) {
      if (typeof h.fence === "number" && (fence === null || h.fence > fence)) {
        fence = h.fence;
      }
      expiresAt = Math.max(expiresAt, h.expiresAt);
    }
    const count = holders.length + lock.hidden;
    let mode = exclusive ? "exclusive" : "shared";
    if (count === 0) {
      mode = lock.delayUntil > performance.now() ? "lock-delay" : "expired";
    }
    return {
      owner,
      fence: text(fence),
      mode,
      expiresAt,
      count: String(count),
    };
  }

  /**
   * When the lock is free if no lease is released: every lease's expiry
   * plus its lock-delay, and an expired lease's delay; null when a lease's
   * delay is unknown (known from an event alone, or beyond the 100 shown).
   */
  function freeAt(lock) {
    let at = lock.delayUntil;
    if (lock.hidden > 0) {
      return null;
    }
    for (const h of lock.holders.values()) {
      if (h.delayMs === null) {
        return null;
      }
      at = Math.max(at, h.expiresAt + h.delayMs);
    }
    return at;
  }

  function buildRow(lock) {
    const row = document.createElement("tr");
    row.dataset.lock = lock.name;
    row.tabIndex = 0;
    row.appendChild(cell("th", lock.name)).scope = "row";
    row.appendChild(cell("td", "", "owner"));
    row.appendChild(cell("td", "", "fence num"));
    row.appendChild(cell("td", "", "mode"));
    row.appendChild(cell("td", "", "expires num"));
    row.appendChild(cell("td", "", "free num"));
    row.appendChild(cell("td", "", "holders num"));
    row.appendChild(cell("td", "", "waiting num"));
    row.appendChild(forceButtonCell("Force release " + lock.name));
    if (lock.name === selected) {
      row.classList.add("selected");
      row.setAttribute("aria-current", "true");
    }
    insertSorted(el.locks, row, "lock", lock.name);
    return row;
  }

  /** The last cell of a row: its force-release button, labelled `label`. */
  function forceButtonCell(label) {
    const actions = cell("td", "", "actions");
    const button = cell("button", "Force release", "force-release");
    button.type = "button";
    button.setAttribute("aria-label", label);
    actions.appendChild(button);
    return actions;
  }

  /** Inserts `row` into `body`, whose rows are sorted by `data-<key>`. */
  function insertSorted(body, row, key, name) {
    let before = null;
    for (const other of body.children) {
      if (other.dataset[key] > name) {
        before = other;
        break;
      }
    }
    body.insertBefore(row, before);
  }

  function render(lock) {
    if (!lock.row) {
      lock.row = buildRow(lock);
    }
    const s = summary(lock);
    lock.expiresAt = s.expiresAt;
    const cells = lock.row.children;
    cells[1].textContent = s.owner;
    cells[2].textContent = s.fence;
    cells[3].textContent = s.mode;
    cells[6].textContent = s.count;
    lock.row.classList.toggle("delayed", s.count === "0");
    renderWaiting(lock);
    renderLeft(lock);
    updateEmpty();
  }

  function renderWaiting(lock) {
    const td = lock.row.children[7];
    const shown = text(lock.waiting);
    if (td.textContent !== shown) {
      td.textContent = shown;
    }
  }

  /** The countdowns of a row: expires in, and free in. */
  function renderLeft(lock) {
    const now = performance.now();
    const held = lock.holders.size + lock.hidden > 0;
    const left = lock.expiresAt - now;
    const expires = lock.row.children[4];
    expires.textContent = held ? formatLeft(left) : "—";
    expires.classList.toggle("expiring", held && left < 5000);
    const at = freeAt(lock);
    lock.row.children[5].textContent = at === null ? "—" : formatLeft(at - now);
  }

  function updateEmpty() {
    el.empty.hidden = locks.size > 0 || el.locks.dataset.ready !== "true";
  }

  function clearLocks() {
    for (const lock of locks.values()) {
      if (lock.row) {
        lock.row.remove();
      }
    }
    locks.clear();
    el.locks.dataset.ready = "false";
    updateEmpty();
  }

  // ---- the semaphores table ----------------------------------------------

  function dropSemaphore(name) {
    const entry = semaphores.get(name);
    if (!entry) {
      return;
    }
    semaphores.delete(name);
    if (entry.row) {
      const hadFocus = entry.row.contains(document.activeElement);
      entry.row.remove();
      if (hadFocus) {
        el.prefix.focus();
      }
    }
    updateSemaphoresEmpty();
  }

  function buildSemaphoreRow(name) {
    const row = document.createElement("tr");
    row.dataset.semaphore = name;
    row.appendChild(cell("th", name)).scope = "row";
    for (const c of ["limit num", "held num", "available num", "owners", "fence num", "free num", "waiting num"]) {
      row.appendChild(cell("td", "", c));
    }
    row.appendChild(forceButtonCell("Force release semaphore " + name));
    insertSorted(el.semaphores, row, "semaphore", name);
    return row;
  }

  /** The holders' labels in grant order, each once, the first three shown. */
  function semaphoreOwners(status) {
    const holders = (Array.isArray(status.holders) ? status.holders : [])
      .slice()
      .sort((a, b) => (Number(a.fence) || 0) - (Number(b.fence) || 0));
    const owners = Array.from(new Set(holders.map((h) => h.owner).filter((o) => o)));
    let shown = owners.length === 0 ? "—" : owners.slice(0, 3).join(", ");
    const more = owners.length - 3;
    if (more > 0) {
      shown += " +" + more;
    }
    return shown;
  }

  /** Shows one SemaphoreStatus of a listing: a semaphore with permits in place. */
  function applySemaphore(status) {
    let entry = semaphores.get(status.name);
    if (!entry) {
      entry = { name: status.name, status: null, seenAt: 0, row: buildSemaphoreRow(status.name) };
      semaphores.set(status.name, entry);
    }
    entry.status = status;
    entry.seenAt = performance.now();
    const cells = entry.row.children;
    cells[1].textContent = text(status.limit);
    cells[2].textContent = text(status.held);
    cells[3].textContent = text(status.available);
    cells[4].textContent = semaphoreOwners(status);
    cells[5].textContent = text(status.fence);
    cells[7].textContent = text(waitingOf(status));
    renderSemaphoreLeft(entry);
  }

  /** Free in: now while a permit is free, else until one can be granted. */
  function renderSemaphoreLeft(entry) {
    const wait = Number(entry.status.available_in_ms) || 0;
    const td = entry.row.children[6];
    td.textContent = wait > 0 ? formatLeft(entry.seenAt + wait - performance.now()) : "now";
  }

  function updateSemaphoresEmpty() {
    el.semaphoresEmpty.hidden = semaphores.size > 0 || el.semaphores.dataset.ready !== "true";
  }

  function clearSemaphores() {
    for (const entry of semaphores.values()) {
      entry.row.remove();
    }
    semaphores.clear();
    el.semaphores.dataset.ready = "false";
    el.semaphoresFailed.hidden = true;
    updateSemaphoresEmpty();
  }

  /**
   * Reads GET /v1/semaphores under the current prefix, every page, and puts
   * the table right: a semaphore missing from the whole listing has no
   * permit in place any more. One read at a time; `restart` aborts the one
   * in flight (its answer may predate a force release). A failure leaves
   * the rows as they are and says why under the table.
   */
  async function readSemaphores(restart) {
    if (semaphoreAbort !== null) {
      if (!restart) {
        return;
      }
      semaphoreAbort.abort();
    }
    if (document.visibilityState !== "visible" && !restart) {
      return;
    }
    const gen = generation;
    const controller = new AbortController();
    semaphoreAbort = controller;
    lastSemaphoreRead = performance.now();
    try {
      const listed = [];
      let cursor = null;
      for (let page = 0; page < LIST_MAX_PAGES; page += 1) {
        const response = await api("/v1/semaphores", {
          query: { prefix, cursor, limit: LIST_PAGE_LIMIT },
          signal: controller.signal,
        });
        if (gen !== generation || controller.signal.aborted) {
          return;
        }
        if (!response.ok) {
          // 401: the lock listing asks for a key; here it would only repeat it.
          el.semaphoresFailed.hidden = response.status === 401;
          el.semaphoresFailed.textContent =
            response.status === 403
              ? "Listing semaphores needs a key with the admin scope."
              : "Listing semaphores failed (" + (await errorMessage(response)) + "); retrying.";
          return;
        }
        const body = await response.json();
        if (gen !== generation || controller.signal.aborted) {
          return;
        }
        listed.push(...(Array.isArray(body.semaphores) ? body.semaphores : []));
        cursor = body.next_cursor;
        if (lastPage(cursor)) {
          break;
        }
      }
      const names = new Set();
      for (const status of listed) {
        if (status && typeof status.name === "string") {
          names.add(status.name);
          applySemaphore(status);
        }
      }
      for (const name of Array.from(semaphores.keys())) {
        if (!names.has(name)) {
          dropSemaphore(name);
        }
      }
      el.semaphoresFailed.hidden = true;
      el.semaphores.dataset.ready = "true";
      updateSemaphoresEmpty();
    } catch (_) {
      // Aborted by a new prefix, key or force release, or no answer: the
      // next round retries.
    } finally {
      if (semaphoreAbort === controller) {
        semaphoreAbort = null;
      }
    }
  }

  // ---- history -----------------------------------------------------------

  function remember(name, type, data) {
    let list = histories.get(name);
    if (!list) {
      list = [];
      histories.set(name, list);
    }
    list.push({ at: new Date(), type, fence: data.fence, owner: data.owner });
    if (list.length > HISTORY_LIMIT) {
      list.splice(0, list.length - HISTORY_LIMIT);
    }
    if (name === selected) {
      renderHistory();
    }
  }

  function select(name) {
    if (selected !== null) {
      const old = locks.get(selected);
      if (old && old.row) {
        old.row.classList.remove("selected");
        old.row.removeAttribute("aria-current");
      }
    }
    selected = name;
    const lock = locks.get(name);
    if (lock && lock.row) {
      lock.row.classList.add("selected");
      lock.row.setAttribute("aria-current", "true");
    }
    renderHistory();
  }

  function renderHistory() {
    if (selected === null) {
      el.history.hidden = true;
      return;
    }
    el.history.hidden = false;
    el.historyHeading.textContent = "History of " + selected;
    const list = histories.get(selected) || [];
    const rows = [];
    for (let i = list.length - 1; i >= 0; i -= 1) {
      const entry = list[i];
      const row = document.createElement("tr");
      row.appendChild(cell("td", formatTime(entry.at)));
      row.appendChild(cell("td", entry.type.replace("_", " ")));
      row.appendChild(cell("td", text(entry.fence), "num"));
      row.appendChild(cell("td", text(entry.owner)));
      rows.push(row);
    }
    el.historyList.replaceChildren(...rows);
    el.historyEmpty.hidden = list.length > 0;
  }

  function closeHistory() {
    const name = selected;
    select(null);
    const lock = name === null ? null : locks.get(name);
    if (lock && lock.row) {
      lock.row.focus();
    }
  }

  // ---- the first fill: GET /v1/locks, every page ----------------------------

  function listPage(cursor, signal) {
    return api("/v1/locks", { query: { prefix, cursor, limit: LIST_PAGE_LIMIT }, signal });
  }

  function lastPage(cursor) {
    return cursor === null || cursor === undefined || cursor === "0";
  }

  async function fill(gen, signal) {
    let cursor = null;
    for (let page = 0; page < LIST_MAX_PAGES; page += 1) {
      const response = await listPage(cursor, signal);
      if (gen !== generation) {
        return false;
      }
      if (response.status === 401) {
        askForKey();
        return false;
      }
      if (!response.ok) {
        // A key without the list scope may still watch the stream.
        setStatus("Listing failed (" + (await errorMessage(response)) + "); showing the live stream only.", "error");
        return true;
      }
      const body = await response.json();
      if (gen !== generation) {
        return false;
      }
      for (const status of body.locks || []) {
        applyStatus(status);
      }
      cursor = body.next_cursor;
      if (lastPage(cursor)) {
        break;
      }
    }
    el.locks.dataset.ready = "true";
    updateEmpty();
    return true;
  }

  // ---- the waiting counts: GET /v1/locks again, every page ------------------

  /**
   * Reads the listing under the current prefix and updates the waiting
   * counts of the rows shown; adds and drops no row (the stream does). Quiet
   * on failure: the rows keep their last counts and the next round retries.
   */
  async function refreshWaiting() {
    if (refreshAbort !== null || document.visibilityState !== "visible" ||
        locks.size === 0 || el.locks.dataset.ready !== "true") {
      return;
    }
    const gen = generation;
    const controller = new AbortController();
    refreshAbort = controller;
    lastRefresh = performance.now();
    try {
      let cursor = null;
      for (let page = 0; page < LIST_MAX_PAGES && locks.size > 0; page += 1) {
        const askedAt = performance.now();
        const response = await listPage(cursor, controller.signal);
        if (gen !== generation || !response.ok) {
          return;
        }
        const body = await response.json();
        if (gen !== generation) {
          return;
        }
        for (const status of body.locks || []) {
          applyWaiting(status, askedAt);
        }
        cursor = body.next_cursor;
        if (lastPage(cursor)) {
          return;
        }
      }
    } catch (_) {
      // Aborted by a new prefix or key, or the broker did not answer.
    } finally {
      if (refreshAbort === controller) {
        refreshAbort = null;
      }
    }
  }

  // ---- the event stream ----------------------------------------------------

  /**
   * A Server-Sent Events parser (the WHATWG event stream format) fed with
   * decoded text; calls onEvent({type, data, id}) per dispatched event.
   */
  function sseParser(onEvent) {
    let buffer = "";
    let data = [];
    let type = "";
    let id = null;

    function line(l) {
      if (l === "") {
        if (data.length > 0) {
          onEvent({ type: type || "message", data: data.join("\n"), id });
        }
        data = [];
        type = "";
        return;
      }
      if (l.charCodeAt(0) === 58 /* ':' comment */) {
        return;
      }
      const colon = l.indexOf(":");
      const field = colon < 0 ? l : l.slice(0, colon);
      let value = colon < 0 ? "" : l.slice(colon + 1);
      if (value.charCodeAt(0) === 32) {
        value = value.slice(1);
      }
      if (field === "event") {
        type = value;
      } else if (field === "data") {
        data.push(value);
      } else if (field === "id" && value.indexOf("\0") < 0) {
        id = value;
      }
      // "retry" and unknown fields: ignored (this page has its own backoff).
    }

    return function push(chunk) {
      buffer += chunk;
      let start = 0;
      for (;;) {
        let end = -1;
        let next = -1;
        for (let i = start; i < buffer.length; i += 1) {
          const c = buffer.charCodeAt(i);
          if (c === 10) {
            end = i;
            next = i + 1;
            break;
          }
          if (c === 13) {
            if (i + 1 >= buffer.length) {
              break; // a CR at the end: wait to see whether LF follows
            }
            end = i;
            next = buffer.charCodeAt(i + 1) === 10 ? i + 2 : i + 1;
            break;
          }
        }
        if (end < 0) {
          break;
        }
        line(buffer.slice(start, end));
        start = next;
      }
      buffer = buffer.slice(start);
    };
  }

  function onEvent(gen, event) {
    if (gen !== generation) {
      return;
    }
    if (event.id !== null) {
      lastEventId = event.id;
    }
    let data;
    try {
      data = JSON.parse(event.data);
    } catch (_) {
      return;
    }
    switch (event.type) {
      case "state":
        if (data && data.complete === true && typeof data.name !== "string") {
          // The end of a snapshot: every held lock has had its `state`.
          const seen = snapshot || new Set();
          for (const name of Array.from(locks.keys())) {
            if (!seen.has(name)) {
              dropLock(name);
            }
          }
          snapshot = null;
          el.locks.dataset.ready = "true";
          updateEmpty();
          return;
        }
        if (data && typeof data.name === "string") {
          if (snapshot === null) {
            snapshot = new Set();
          }
          snapshot.add(data.name);
          applyStatus(data);
          remember(data.name, "state", {
            fence: data.held ? data.fence : null,
            owner: data.held ? data.owner : null,
          });
        }
        return;
      case "acquired":
      case "extended":
      case "released":
      case "expired":
      case "force_released":
        applyChange(gen, event.type, data);
        if (data && typeof data.name === "string" && data.mode !== "permit") {
          remember(data.name, event.type, data);
        }
        return;
      case "lagged":
        // A fresh run of `state` events follows and puts the table right.
        setStatus(
          "The page fell behind the broker (" + text(data && data.missed) + " events missed); reloading the state.",
        );
        snapshot = null;
        return;
      default:
        return;
    }
  }

  /** One connection; resolves to {stop} or {retryAfterMs}. */
  async function streamOnce(gen, controller) {
    const extra = { Accept: "text/event-stream" };
    if (lastEventId !== null) {
      extra["Last-Event-ID"] = lastEventId;
    }
    const response = await api("/v1/events", {
      query: { prefix },
      headers: extra,
      signal: controller.signal,
    });
    if (gen !== generation) {
      return { stop: true };
    }
    if (response.status === 401) {
      askForKey();
      setConnection("stopped", "Needs an API key");
      return { stop: true };
    }
    if (response.status === 403) {
      setStatus("This key may not watch locks under this prefix (" + (await errorMessage(response)) + ").", "error");
      setConnection("stopped", "Not allowed");
      return { stop: true };
    }
    if (response.status === 429) {
      const after = Number(response.headers.get("Retry-After"));
      setStatus("The broker has too many open streams; retrying.", "error");
      return { retryAfterMs: after > 0 ? after * 1000 : null };
    }
    if (!response.ok || !response.body) {
      setStatus("The event stream failed (" + (await errorMessage(response)) + "); retrying.", "error");
      return {};
    }
    const reader = response.body.getReader();
    const decoder = new TextDecoder();
    const push = sseParser((event) => {
      controller.gotEvent = true;
      onEvent(gen, event);
    });
    snapshot = null;
    lastActivity = performance.now();
    streamLive = true;
    setConnection("live", "Live");
    for (;;) {
      const { value, done } = await reader.read();
      if (gen !== generation) {
        return { stop: true };
      }
      if (done) {
        return {};
      }
      lastActivity = performance.now();
      push(decoder.decode(value, { stream: true }));
    }
  }

  async function runStream(gen) {
    let failures = 0;
    while (gen === generation) {
      const controller = new AbortController();
      abort = controller;
      streamLive = false;
      let outcome;
      try {
        outcome = await streamOnce(gen, controller);
      } catch (_) {
        if (gen !== generation) {
          return;
        }
        outcome = {};
      }
      if (gen !== generation || outcome.stop) {
        return;
      }
      // A connection that delivered events starts the backoff over.
      failures = controller.gotEvent ? 1 : failures + 1;
      streamLive = false;
      const backoff = Math.min(BACKOFF_MAX_MS, BACKOFF_FIRST_MS * 2 ** Math.max(0, failures - 1));
      const jittered = Math.round(backoff * (0.8 + Math.random() * 0.4));
      const wait = outcome.retryAfterMs || jittered;
      setConnection("retrying", "Reconnecting in " + Math.ceil(wait / 1000) + " s…");
      await sleep(wait);
    }
  }

  // ---- starting over (new prefix or key) -----------------------------------

  async function start() {
    generation += 1;
    const gen = generation;
    if (abort) {
      abort.abort();
    }
    if (refreshAbort) {
      refreshAbort.abort();
      refreshAbort = null;
    }
    abort = new AbortController();
    lastEventId = null;
    snapshot = null;
    streamLive = false;
    clearLocks();
    clearSemaphores();
    readSemaphores(true);
    setConnection("connecting", "Connecting…");
    let go;
    try {
      go = await fill(gen, abort.signal);
    } catch (_) {
      go = gen === generation;
      if (go) {
        setStatus("Listing failed; showing the live stream only.", "error");
      }
    }
    if (go && gen === generation) {
      runStream(gen);
    } else if (gen === generation) {
      setConnection("stopped", "Needs an API key");
    }
  }

  function applyPrefix() {
    const value = el.prefix.value;
    if (value === prefix && streamLive) {
      return;
    }
    prefix = value;
    const url = new URL(window.location.href);
    if (prefix) {
      url.searchParams.set("prefix", prefix);
    } else {
      url.searchParams.delete("prefix");
    }
    window.history.replaceState(null, "", url.toString());
    setStatus(prefix ? "Watching locks and semaphores under “" + prefix + "”." : "Watching every lock and semaphore.");
    start();
  }

  // ---- force release ---------------------------------------------------------

  /** Asks to confirm the force release of the lock or semaphore `name`. */
  function askRelease(kind, name, opener) {
    pendingRelease = { kind, name };
    releaseOpener = opener;
    el.confirmWhat.textContent = kind === "semaphore" ? "permit" : "lease";
    el.confirmName.textContent = name;
    el.confirmYes.disabled = false;
    el.confirm.showModal();
    el.confirmNo.focus();
  }

  async function forceRelease() {
    if (pendingRelease === null) {
      return;
    }
    const { kind, name } = pendingRelease;
    const semaphore = kind === "semaphore";
    const unit = semaphore ? "permit" : "lease";
    el.confirmYes.disabled = true;
    let message;
    let outcome = "error";
    try {
      const response = await api(semaphore ? semaphorePath(name) : lockPath(name), { method: "DELETE" });
      if (response.status === 401) {
        el.confirm.close();
        askForKey();
        return;
      }
      if (response.status === 403) {
        message = "Force release of " + name + " refused: this key lacks the admin scope.";
      } else if (!response.ok) {
        message = "Force release of " + name + " failed: " + (await errorMessage(response));
      } else {
        const body = await response.json();
        outcome = "ok";
        if (body.released) {
          const ended = Number(body.leases_ended) || 0;
          message =
            "Force released " + name + ": " + ended + " " + unit + (ended === 1 ? "" : "s") +
            " ended" + (body.fence !== null && body.fence !== undefined ? " (fence " + body.fence + ")." : ".");
        } else {
          message = name + " was not held; nothing to release.";
        }
        if (semaphore) {
          // No event says so: the row goes now, and the listing is read anew.
          dropSemaphore(name);
          readSemaphores(true);
        } else {
          // A lock kept by a lock-delay alone had no lease to end, so no
          // event may follow; a held lock's row goes with its event.
          const lock = locks.get(name);
          if (lock && lock.holders.size + lock.hidden === 0) {
            dropLock(name);
          }
        }
      }
    } catch (_) {
      message = "Force release of " + name + " failed: the broker did not answer.";
    }
    el.confirm.close();
    setStatus(message, outcome);
  }

  // ---- wiring ------------------------------------------------------------------

  el.locks.addEventListener("click", (event) => {
    const row = event.target.closest("tr[data-lock]");
    if (!row) {
      return;
    }
    if (event.target.closest("button.force-release")) {
      askRelease("lock", row.dataset.lock, event.target.closest("button"));
      return;
    }
    select(row.dataset.lock);
  });

  el.semaphores.addEventListener("click", (event) => {
    const row = event.target.closest("tr[data-semaphore]");
    const button = event.target.closest("button.force-release");
    if (row && button) {
      askRelease("semaphore", row.dataset.semaphore, button);
    }
  });

  el.locks.addEventListener("keydown", (event) => {
    const row = event.target;
    if (!(row instanceof HTMLTableRowElement) || !row.dataset.lock) {
      return;
    }
    if (event.key === "Enter" || event.key === " ") {
      event.preventDefault();
      select(row.dataset.lock);
    } else if (event.key === "ArrowDown" && row.nextElementSibling) {
      event.preventDefault();
      row.nextElementSibling.focus();
    } else if (event.key === "ArrowUp" && row.previousElementSibling) {
      event.preventDefault();
      row.previousElementSibling.focus();
    }
  });

  el.historyClose.addEventListener("click", closeHistory);

  el.confirmYes.addEventListener("click", forceRelease);
  el.confirmNo.addEventListener("click", () => el.confirm.close());
  el.confirm.addEventListener("close", () => {
    pendingRelease = null;
    const opener = releaseOpener;
    releaseOpener = null;
    if (opener && opener.isConnected) {
      opener.focus();
    } else {
      el.prefix.focus();
    }
  });

  el.prefixForm.addEventListener("submit", (event) => {
    event.preventDefault();
    applyPrefix();
  });

  el.keyForm.addEventListener("submit", (event) => {
    event.preventDefault();
    const key = el.keyInput.value.trim();
    if (!/^[\x21-\x7e]+$/.test(key)) {
      setStatus("An API key is printable ASCII without spaces.", "error");
      el.keyInput.focus();
      return;
    }
    storeKey(key);
    el.keyInput.value = "";
    el.keyPanel.hidden = true;
    setStatus("Key saved for this tab.", "ok");
    start();
  });

  el.forgetKey.addEventListener("click", () => {
    storeKey("");
    setStatus("Key forgotten.", "ok");
    el.prefix.focus();
    start();
  });

  // Each second: the countdowns of every row, the end of a lock-delay, and
  // a stream gone silent.
  window.setInterval(() => {
    for (const lock of Array.from(locks.values())) {
      if (lock.holders.size + lock.hidden === 0 && lock.delayUntil > 0 && !inPlace(lock)) {
        dropLock(lock.name);
      } else if (lock.row) {
        renderLeft(lock);
      }
    }
    for (const entry of semaphores.values()) {
      renderSemaphoreLeft(entry);
    }
    if (abort && !abort.signal.aborted && lastActivity > 0 &&
        performance.now() - lastActivity > STALE_AFTER_MS && el.connection.dataset.state === "live") {
      lastActivity = 0;
      abort.abort();
    }
  }, 1000);

  // The waiting counts, every 5 s while the page is visible, and at once when
  // it shows again after a longer time hidden.
  // The same for the semaphore listing.
  window.setInterval(refreshWaiting, WAITING_REFRESH_MS);
  window.setInterval(() => readSemaphores(false), SEMAPHORE_REFRESH_MS);
  document.addEventListener("visibilitychange", () => {
    if (document.visibilityState !== "visible") {
      return;
    }
    if (performance.now() - lastRefresh >= WAITING_REFRESH_MS) {
      refreshWaiting();
    }
    if (performance.now() - lastSemaphoreRead >= SEMAPHORE_REFRESH_MS) {
      readSemaphores(false);
    }
  });

  const initial = new URL(window.location.href).searchParams.get("prefix");
  el.prefix.value = initial || "";
  prefix = el.prefix.value;
  el.forgetKey.hidden = !storedKey();
  start();
})();
