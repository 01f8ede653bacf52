"""Generate examples/demo/sales.xlsx, the demo workbook, deterministically.

Run with the rootfs's own Python and openpyxl, e.g. in an overlay of the tree:
    python3 make_sales.py sales.xlsx
Same script, same bytes: the RNG is seeded and the zip entries get a fixed
timestamp.
"""

import datetime as dt
import io
import random
import sys
import zipfile

from openpyxl import Workbook
from openpyxl.styles import Font

SEED = 2025
FIXED = dt.datetime(2025, 12, 31, 18, 0, 0)

REGIONS = {"North": 1.00, "South": 0.85, "East": 1.15, "West": 0.95}
# product: (list price, typical units per order)
PRODUCTS = {
    "Notebook A5": (4.50, 40),
    "Gel Pen 12-pack": (6.90, 25),
    "Desk Lamp": (34.00, 6),
    "Monitor Stand": (59.00, 4),
    "Office Chair": (149.00, 2),
}
# Orders per month: a slow first quarter, a summer dip, a strong Q4.
ORDERS = [21, 20, 24, 25, 26, 22, 19, 21, 26, 28, 32, 36]


def rows(rng):
    for month, n in enumerate(ORDERS, start=1):
        days = 31 if month == 12 else (dt.date(2025, month + 1, 1) - dt.timedelta(days=1)).day
        orders = []
        for _ in range(n):
            day = dt.date(2025, month, rng.randint(1, days))
            region = rng.choices(list(REGIONS), weights=list(REGIONS.values()))[0]
            product = rng.choice(list(PRODUCTS))
            price, typical = PRODUCTS[product]
            units = max(1, round(rng.gauss(typical, typical / 3)))
            if units >= 2 * typical:  # bulk discount
                price = round(price * 0.9, 2)
            orders.append((day, region, product, units, price))
        orders.sort()
        yield from orders


def main(out):
    wb = Workbook()
    ws = wb.active
    ws.title = "sales"
    ws.append(["date", "region", "product", "units", "unit_price"])
    for cell in ws[1]:
        cell.font = Font(bold=True)
    for day, region, product, units, price in rows(random.Random(SEED)):
        ws.append([day, region, product, units, price])
        ws.cell(ws.max_row, 1).number_format = "yyyy-mm-dd"
        ws.cell(ws.max_row, 5).number_format = "#,##0.00"
    for col, width in zip("ABCDE", (12, 10, 18, 8, 11)):
        ws.column_dimensions[col].width = width
    ws.freeze_panes = "A2"
    wb.properties.creator = "jailcell demo"
    wb.properties.created = FIXED
    wb.properties.modified = FIXED

    buf = io.BytesIO()
    wb.save(buf)
    # openpyxl stamps zip entries with the current time: rewrite them.
    with zipfile.ZipFile(buf) as src, zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as dst:
        for info in src.infolist():
            fixed = zipfile.ZipInfo(info.filename, date_time=FIXED.timetuple()[:6])
            fixed.compress_type = zipfile.ZIP_DEFLATED
            dst.writestr(fixed, src.read(info.filename))
    print(f"wrote {out}: {ws.max_row - 1} rows")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "sales.xlsx")
