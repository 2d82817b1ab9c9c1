// The items API. Paths are relative: the Vite server proxies /api to the backend (see vite.config.js).
const ITEMS = '/api/v1/items/';

async function check(response) {
  if (!response.ok) {
    throw new Error(`${response.status} ${response.statusText}`);
  }
  return response;
}

export async function listItems() {
  const response = await check(await fetch(ITEMS));
  return response.json();
}

export async function createItem(item) {
  const response = await check(
    await fetch(ITEMS, {
      method: 'POST',
      headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify(item),
    }),
  );
  return response.json();
}

export async function deleteItem(id) {
  await check(await fetch(`${ITEMS}${id}`, { method: 'DELETE' }));
}
