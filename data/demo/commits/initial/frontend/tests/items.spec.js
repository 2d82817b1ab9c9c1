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
});
