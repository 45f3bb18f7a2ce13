// Recipients from a CSV file a person uploads to send one message to many: the
// column headed to, phone, number, recipient or mobile (or the first column when
// no row is a header), each value with its row number so a refusal can name the
// row. Spaces, dashes, dots and parentheses are dropped from a number; anything
// else is left for the API to refuse, item by item.

const HEADERS = ['to', 'phone', 'number', 'recipient', 'mobile', 'phone_number'];

/**
 * The rows of a CSV text (RFC 4180: quoted fields may hold commas, quotes and line breaks).
 * @param {string} text @returns {string[][]}
 */
function rowsOf(text) {
  /** @type {string[][]} */
  const rows = [];
  /** @type {string[]} */
  let row = [];
  let field = '';
  let quoted = false;
  for (let i = 0; i < text.length; i++) {
    const c = text[i];
    if (quoted) {
      if (c === '"' && text[i + 1] === '"') {
        field += '"';
        i++;
      } else if (c === '"') quoted = false;
      else field += c;
    } else if (c === '"') quoted = true;
    else if (c === ',' || c === ';') {
      row.push(field);
      field = '';
    } else if (c === '\n' || c === '\r') {
      if (c === '\r' && text[i + 1] === '\n') i++;
      row.push(field);
      rows.push(row);
      row = [];
      field = '';
    } else field += c;
  }
  if (field !== '' || row.length > 0) rows.push([...row, field]);
  return rows;
}

/**
 * The recipients a CSV lists, in order, each with its row (from 1, as a spreadsheet counts); empty cells are skipped.
 * @param {string} text @returns {{ row: number, to: string }[]}
 */
export function recipientsOf(text) {
  const rows = rowsOf(text.replace(/^\uFEFF/, ''));
  const head = (rows[0] ?? []).map((cell) => cell.trim().toLowerCase());
  const named = head.findIndex((cell) => HEADERS.includes(cell));
  const column = Math.max(named, 0);
  const first = named >= 0 ? 1 : 0;
  return rows.slice(first).flatMap((cells, i) => {
    const to = (cells[column] ?? '').replace(/[\s\-.()]/g, '');
    return to ? [{ row: i + first + 1, to }] : [];
  });
}
