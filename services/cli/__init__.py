"""The ``gridledger`` command line, on click; each command group lives in its own module.

How to add a command (or a group of them):

1. Write ``services/cli/<group>.py`` with click commands. Keep the work in
   plain functions the command calls; the command parses, calls and prints.
   Commands that talk to the API take ``@api_options`` (``--token``, ``--api``,
   and a ``conn`` argument whose ``conn.client`` is the HTTP client); every
   command that prints a result takes ``@output_options`` (``-o
   json|yaml|table`` and ``--json``, and an ``out`` argument) and prints with
   ``out.emit(data, text=function_that_renders_the_table_form)``, so JSON and
   YAML come for free. Tables go through ``render.table`` (rich on a terminal,
   plain aligned text when piped).
2. Return the exit code from the command; raise ``GridledgerError`` (or a
   subclass) for an error the user can fix, with a message that says how.
   Usage mistakes are click's (``click.BadParameter``, ``click.UsageError``).
3. End the module with ``COMMANDS = (command, ...)`` and add the module to
   ``COMMAND_MODULES`` in ``services/cli/main.py``.
4. Test it through ``services.cli.main.main([...])`` (see ``tests/cli``).

Minimal example::

    import click

    from services.cli.options import Connection, Output, api_options, output_options

    @click.command("outputs", short_help="a job's stored outputs")
    @click.argument("job")
    @api_options
    @output_options
    def outputs(conn: Connection, out: Output, job: str) -> int:
        \"\"\"The outputs JOB stored, with their sizes.\"\"\"
        out.emit(conn.client.get(f"/v1/jobs/{job}/outputs"), text=render_outputs)
        return 0

    COMMANDS = (outputs,)
"""
