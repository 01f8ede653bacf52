# Demo cell: monthly revenue from sales.xlsx (in the cell's cwd, /work),
# printed as a table and drawn as a trend line in monthly_sales.png.
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pandas as pd
from matplotlib.ticker import StrMethodFormatter

sales = pd.read_excel("sales.xlsx", sheet_name="sales", engine="openpyxl", parse_dates=["date"])
sales["revenue"] = sales["units"] * sales["unit_price"]

monthly = sales.groupby(sales["date"].dt.to_period("M")).agg(
    orders=("revenue", "size"),
    units=("units", "sum"),
    revenue=("revenue", "sum"),
)
monthly.index = monthly.index.strftime("%Y-%m")
monthly.index.name = "month"

print(monthly.to_string(formatters={"revenue": "{:,.2f}".format}))
print(f"\ntotal revenue 2025: {monthly['revenue'].sum():,.2f}")
best = monthly["revenue"].idxmax()
print(f"best month: {best} ({monthly.loc[best, 'revenue']:,.2f})")

fig, ax = plt.subplots(figsize=(9, 4.5))
ax.plot(monthly.index, monthly["revenue"], marker="o", linewidth=2)
ax.set_title("Monthly revenue, 2025")
ax.set_xlabel("month")
ax.set_ylabel("revenue")
ax.yaxis.set_major_formatter(StrMethodFormatter("{x:,.0f}"))
ax.grid(True, alpha=0.3)
ax.tick_params(axis="x", rotation=45)
fig.tight_layout()
fig.savefig("monthly_sales.png", dpi=100)
plt.close(fig)
print("saved monthly_sales.png")
