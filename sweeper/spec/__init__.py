"""The sweep file: its schema (`schema`), YAML loading with line numbers (`yamlio`), and the
names it accepts (`catalog`). No torch, no Ray: `sweeper validate` answers from here."""
