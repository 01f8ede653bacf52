// Package termtext turns text a program wrote for a terminal into the text
// a reader of a cell's output wants: ANSI escape sequences (colours, cursor
// moves, window titles, hyperlink markers) removed, and a carriage return
// that a terminal would not show before a newline ("\r\n") dropped.
//
// Its input is a sandbox's output, untrusted: the cleaner is a byte-level
// state machine that keeps no bytes of a sequence it drops, only which
// state it is in, so a stream holds at most a count of pending "\r" bytes
// between writes, whatever the input. It never adds or reorders text, and
// valid UTF-8 stays valid: only ASCII bytes end a sequence, so a dropped
// stretch never splits a character.
//
// What is removed (ECMA-48, 7-bit forms):
//   - CSI: ESC '[' then parameter bytes 0x30-0x3F, intermediate bytes
//     0x20-0x2F and one final byte 0x40-0x7E (SGR colours, cursor moves,
//     erase line). A byte outside those ranges ends the sequence without
//     being part of it, as terminals do: it is kept as text.
//   - OSC, DCS, SOS, PM, APC: ESC then ']', 'P', 'X', '^' or '_', up to
//     and including BEL or ST (ESC '\'); unterminated, to the end of the
//     text.
//   - other escapes: ESC, intermediate bytes 0x20-0x2F, one final byte
//     0x30-0x7E (ESC 7, ESC ( B, ESC M).
//   - a lone ESC followed by anything else.
//
// What stays: every other character, other control characters included
// (a lone "\r", so progress bars that redraw a line keep their frames;
// "\b"; BEL), and the 8-bit C1 controls, which UTF-8 terminals treat as
// characters.
package termtext
