import { useEffect, useState } from 'react';
import { createItem, deleteItem, listItems } from './api.js';

function countLabel(count) {
  return count === 1 ? '1 item' : `${count} items`;
}

export default function App() {
  const [items, setItems] = useState([]);
  const [loading, setLoading] = useState(true);
  const [error, setError] = useState('');
  const [title, setTitle] = useState('');
  const [description, setDescription] = useState('');

  useEffect(() => {
    // React's StrictMode runs effects twice in development: only the last answer counts.
    let ignore = false;
    listItems()
      .then((data) => {
        if (!ignore) setItems(data);
      })
      .catch((err) => {
        if (!ignore) setError(`Could not load the items: ${err.message}`);
      })
      .finally(() => {
        if (!ignore) setLoading(false);
      });
    return () => {
      ignore = true;
    };
  }, []);

  async function handleSubmit(event) {
    event.preventDefault();
    try {
      const item = await createItem({ title, description: description || null });
      setItems((current) => [...current, item]);
      setTitle('');
      setDescription('');
      setError('');
    } catch (err) {
      setError(`Could not create the item: ${err.message}`);
    }
  }

  async function handleDelete(item) {
    try {
      await deleteItem(item.id);
      setItems((current) => current.filter((other) => other.id !== item.id));
      setError('');
    } catch (err) {
      setError(`Could not delete the item: ${err.message}`);
    }
  }

  return (
    <main>
      <h1>Items</h1>
      <form aria-label="New item" onSubmit={handleSubmit}>
        <label htmlFor="item-title">Title</label>{' '}
        <input
          id="item-title"
          value={title}
          onChange={(event) => setTitle(event.target.value)}
          required
          maxLength={255}
        />{' '}
        <label htmlFor="item-description">Description</label>{' '}
        <input
          id="item-description"
          value={description}
          onChange={(event) => setDescription(event.target.value)}
          maxLength={255}
        />{' '}
        <button type="submit" disabled={loading}>
          Add item
        </button>
      </form>
      {error && <p role="alert">{error}</p>}
      {loading && <p>Loading…</p>}
      {!loading && !error && (
        <p role="status">{items.length === 0 ? 'No items yet' : countLabel(items.length)}</p>
      )}
      <ul aria-label="Items">
        {items.map((item) => (
          <li key={item.id}>
            {item.title}
            {item.description && ` — ${item.description}`}{' '}
            <button type="button" aria-label={`Delete ${item.title}`} onClick={() => handleDelete(item)}>
              Delete
            </button>
          </li>
        ))}
      </ul>
    </main>
  );
}
