// @ts-check
// Table rows updated in place: the operator's tables are refreshed by a poll, and rebuilding them
// would take the keyboard focus away (to <body>) and throw away what is being typed in a row.

/**
 * Makes `tbody` hold `fresh`, in order. A fresh row with a `data-key` that the table already has
 * updates that row instead: only its cells that differ are replaced, so an unchanged cell keeps its
 * element (a focused button stays focused). A row passed in as the very element already in the
 * table (an open editor) is left alone.
 * @param {HTMLElement} tbody
 * @param {HTMLTableRowElement[]} fresh
 */
export function syncRows(tbody, fresh) {
  /** @type {Map<string, HTMLElement>} */
  const old = new Map();
  for (const row of /** @type {HTMLElement[]} */ ([...tbody.children])) if (row.dataset.key) old.set(row.dataset.key, row);
  let cursor = tbody.firstElementChild;
  for (const row of fresh) {
    const key = row.dataset.key;
    let node = /** @type {Element} */ (row);
    const kept = key === undefined ? undefined : old.get(key);
    if (kept && kept !== row && patch(kept, row)) node = kept;
    if (key !== undefined) old.delete(key);
    if (node === cursor) cursor = cursor.nextElementSibling;
    else tbody.insertBefore(node, cursor);
  }
  while (cursor) {
    const next = cursor.nextElementSibling;
    cursor.remove();
    cursor = next;
  }
}

/**
 * Brings `row` up to `fresh` cell by cell; false when their shapes differ (then `fresh` replaces it).
 * @param {Element} row @param {Element} fresh
 */
function patch(row, fresh) {
  const cells = [...row.children];
  const want = [...fresh.children];
  if (cells.length !== want.length) return false;
  for (const a of [...row.attributes]) if (!fresh.hasAttribute(a.name)) row.removeAttribute(a.name);
  for (const a of [...fresh.attributes]) if (row.getAttribute(a.name) !== a.value) row.setAttribute(a.name, a.value);
  // isEqualNode compares markup, not listeners: an equal cell's buttons do the same thing.
  cells.forEach((cell, i) => {
    if (!cell.isEqualNode(want[i])) cell.replaceWith(want[i]);
  });
  return true;
}
