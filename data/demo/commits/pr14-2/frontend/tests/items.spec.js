import { expect, test } from '@playwright/test';

// The tests run against the live backend (through the dev server's /api proxy) and never empty its
// database: every item they create has a title no other run uses.
function uniqueTitle(prefix) {
  return `${prefix} ${Date.now()}-${Math.floor(Math.random() * 1e6)}`;
}

test.describe('Items', () => {
  test('shows the page title and heading', async ({ page }) => {
    await page.goto('/');
    await expect(page).toHaveTitle('Items');
    await expect(page.getByRole('heading', { name: 'Items' })).toBeVisible();
  });

  test('creating an item shows it in the list', async ({ page }) => {
    const title = uniqueTitle('Groceries');
    await page.goto('/');
    await page.getByLabel('Title', { exact: true }).fill(title);
    await page.getByLabel('Description', { exact: true }).fill('milk, eggs');
    await page.getByRole('button', { name: 'Add item' }).click();
    await expect(page.getByRole('list', { name: 'Items' }).getByText(title)).toBeVisible();
  });

  test('shows an empty state when there are no items', async ({ page }) => {
    // Whatever the database holds, the list answers no items.
    await page.route('**/api/v1/items/', (route) => route.fulfill({ json: [] }));
    await page.goto('/');
    await expect(page.getByText('No items yet')).toBeVisible();
    await expect(page.getByRole('listitem')).toHaveCount(0);
  });

  test('shows how many items there are', async ({ page }) => {
    const items = [
      { id: 1, title: 'Milk', description: null, archived: false },
      { id: 2, title: 'Eggs', description: 'a dozen', archived: false },
    ];
    await page.route('**/api/v1/items/', (route) => route.fulfill({ json: items }));
    await page.goto('/');
    await expect(page.getByText('2 items', { exact: true })).toBeVisible();
    await expect(page.getByText('No items yet')).toHaveCount(0);
  });
});
